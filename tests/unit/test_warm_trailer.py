"""A warm run's marks are taken off its streams, whatever the chunks they arrive in:
the tool's bytes pass on unchanged, the exit code and the bound time are read, and a
trailer with another nonce (the tool printing one) is the tool's own output."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from hands.sandbox.bootstrap import BOUND_MARK, EXIT_MARK
from hands.sandbox.trailer import Trailer

NONCE = "0123456789abcdef0123456789abcdef"


def _trailer(code: int, nonce: str = NONCE) -> bytes:
    return f"\n{EXIT_MARK}{nonce} {code}\n".encode()


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(
    st.binary(max_size=300) | st.text(max_size=200).map(str.encode),
    st.lists(st.integers(min_value=0), max_size=12),
    st.integers(min_value=0, max_value=255),
)
def test_the_tools_bytes_pass_unchanged_and_the_code_is_read(
    tool: bytes, cuts: list[int], code: int
) -> None:
    seen = bytearray()
    stream = Trailer(seen.extend, nonce=NONCE)
    for chunk in _split(tool + _trailer(code), cuts):
        stream.feed(chunk)
    assert stream.code == code and bytes(seen) == tool


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=12))
def test_the_bound_mark_is_read_and_taken_off(tool: bytes, cuts: list[int]) -> None:
    mark = BOUND_MARK + json.dumps({"operation": "op-1", "at": 1700000000.5}) + "\n"
    seen = bytearray()
    stream = Trailer(seen.extend, nonce=None, bound=True)
    for chunk in _split(mark.encode() + tool + _trailer(3), cuts):
        stream.feed(chunk)
    assert stream.code == 3 and bytes(seen) == tool
    assert stream.operation == "op-1" and stream.bound_at is not None
    assert stream.bound_at.timestamp() == 1700000000.5


def test_a_trailer_with_another_nonce_is_the_tools_output() -> None:
    seen = bytearray()
    stream = Trailer(seen.extend, nonce=NONCE)
    fake = _trailer(0, "f" * 32)
    stream.feed(b"x" + fake)
    assert not stream.ended
    stream.feed(_trailer(1))
    assert stream.code == 1 and bytes(seen) == b"x" + fake


def test_a_stream_that_ends_without_its_trailer_keeps_every_byte() -> None:
    seen = bytearray()
    stream = Trailer(seen.extend, nonce=NONCE)
    stream.feed(b"partial line\n")
    assert bytes(seen) == b"partial line"  # the newline could start the trailer
    stream.close()
    assert bytes(seen) == b"partial line\n" and not stream.ended


def test_a_line_is_passed_on_as_soon_as_it_cannot_be_the_trailer() -> None:
    seen = bytearray()
    stream = Trailer(seen.extend, nonce=NONCE)
    stream.feed(b"progress 50%\nprogress 60")
    assert bytes(seen) == b"progress 50%\nprogress 60"
