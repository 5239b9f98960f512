"""A run's stdout: captured without holding it in memory, then judged whole.

``Capture`` receives stdout as the engine streams it: up to ``limit + 1`` bytes go to a
temporary file (on disk, never a growing buffer), the last ``tail`` bytes stay in memory
for diagnosis, and the total is counted to enforce the output limit.

``judge`` decides what the captured stdout is, the same way every time: the tool's
output when it is exactly one JSON document the Hands can accept, otherwise ``None`` and
the reason — bytes that are not UTF-8, no document, trailing data, ``NaN``/``Infinity``,
nesting deeper than ``MAX_OUTPUT_DEPTH`` (the store, the bus and every model that
carries an output must be able to hold it), anything the result models refuse. It reads
the file in chunks and stops at the first byte that rules the output out, so garbage is
refused without being read into memory; a document that can be accepted is parsed whole
(at most the tool's output limit, which the operator caps at registration).
"""

from __future__ import annotations

import codecs
import json
import tempfile
import threading
from typing import IO

from pydantic import JsonValue, TypeAdapter, ValidationError

#: Deepest nesting of arrays/objects an output may have (deeper is ``invalid_output``).
MAX_OUTPUT_DEPTH = 64

_CHUNK = 64 * 1024
_WHITESPACE = " \t\n\r"
_STARTS = frozenset('{["-0123456789tfn')
_JSON_VALUE: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


class Capture:
    """Stdout as it arrives: spooled to a temporary file up to the limit (when
    ``spool``), its last ``tail`` bytes, and the total (to enforce the limit)."""

    def __init__(self, limit: int, tail: int, *, spool: bool = True) -> None:
        self.limit, self.tail_size = limit, tail
        self.total = 0
        self.tail = bytearray()
        self.file: IO[bytes] | None = None
        if spool:  # closed by ``close``, which every owner calls in a ``finally``
            self.file = tempfile.TemporaryFile()  # noqa: SIM115
        self.lock = threading.Lock()

    @property
    def over(self) -> bool:
        return self.total > self.limit

    def feed(self, data: bytes) -> bool:
        """Keep ``data``; False once past the limit."""
        with self.lock:
            room = self.limit + 1 - self.total
            if self.file is not None and room > 0:
                self.file.write(data[:room])
            self.total += len(data)
            if self.tail_size:
                self.tail += data[-self.tail_size :]
                del self.tail[: -self.tail_size]
            return not self.over

    def tail_text(self) -> str:
        with self.lock:
            return bytes(self.tail).decode(errors="replace")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def judge(capture: Capture) -> tuple[JsonValue, str | None]:
    """The one JSON document the capture holds, or why there is none (blocking: call it
    in a thread)."""
    if capture.file is None:
        raise ValueError("judging needs a spooled capture")
    with capture.lock:
        capture.file.seek(0)
        text, problem = _text(capture.file)
    if problem is not None:
        return None, problem
    return _document(text)


def _text(file: IO[bytes]) -> tuple[str, str | None]:
    """The whole stdout as text, refused at the first byte that is not UTF-8 or that
    cannot start a JSON document."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    parts: list[str] = []
    offset, started = 0, False
    while True:
        chunk = file.read(_CHUNK)
        try:
            text = decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as error:
            bad = chunk[error.start : error.start + 1]
            return "", f"stdout is not UTF-8 (byte {offset + error.start} is {bad!r})"
        if not started and text.strip(_WHITESPACE):
            first = text.lstrip(_WHITESPACE)[0]
            if first not in _STARTS:
                return "", f"stdout does not start with a JSON value (it starts with {first!r})"
            started = True
        parts.append(text)
        offset += len(chunk)
        if not chunk:
            break
    return "".join(parts), None if started else "empty"


def _document(text: str) -> tuple[JsonValue, str | None]:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        value = json.loads(text, parse_constant=refuse)
    except RecursionError:
        return None, f"nested deeper than {MAX_OUTPUT_DEPTH} levels"
    except ValueError as error:
        return None, str(error)[:200]
    if _depth(value) > MAX_OUTPUT_DEPTH:
        return None, f"nested deeper than {MAX_OUTPUT_DEPTH} levels"
    try:
        return _JSON_VALUE.validate_python(value), None
    except (ValidationError, RecursionError) as error:
        return None, f"not an output the Hands can accept: {str(error)[:200]}"


def _depth(value: object) -> int:
    """How deeply arrays and objects nest in ``value`` (iteratively: no recursion)."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict | list):
            level += 1
            deepest = max(deepest, level)
            if deepest > MAX_OUTPUT_DEPTH:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, level) for child in children)
    return deepest
