"""The marks a warm run's bootstrap writes around the tool's own output, taken off.

A warm container's stderr starts with the bound mark (``bootstrap.BOUND_MARK`` and a
JSON object: which operation, bound when), and its stdout and stderr each end with the
exit trailer (``"\\n" + EXIT_MARK + nonce + " " + code + "\\n"``) once the tool's
interpreter is done. A ``Trailer`` passes one stream's bytes on to a sink with those
taken off: it holds back only what could still be the start of the trailer (from the
last newline on), so previews lag by at most a line's end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime

from hands.sandbox.bootstrap import BOUND_MARK, EXIT_MARK

_START = b"\n" + EXIT_MARK.encode()
#: the trailer, with a nonce of hex digits and an exit code
_TRAILER = re.compile(rb"\n" + re.escape(EXIT_MARK.encode()) + rb"([0-9a-f]{1,64}) (\d{1,3})\n\Z")
_LONGEST = len(_START) + 64 + 1 + 3 + 1
_BOUND = BOUND_MARK.encode()


class Trailer:
    """One stream of a warm run, its marks taken off on the way to ``sink``.

    ``nonce``: the trailer must carry it (a live run, whose nonce the Hands chose);
    None: any nonce (a run collected from its log after the Hands that bound it died).
    ``bound``: the stream starts with the bound mark (stderr), which is taken off and
    read (``bound_at``)."""

    def __init__(
        self, sink: Callable[[bytes], object], *, nonce: str | None, bound: bool = False
    ) -> None:
        self._sink, self._nonce = sink, nonce
        self._pending = bytearray()
        self._head: bytearray | None = bytearray() if bound else None
        #: the exit code the trailer told, once it arrived
        self.code: int | None = None
        #: when the bootstrap was bound (its container's clock), once its mark was read
        self.bound_at: datetime | None = None
        self.operation: str | None = None

    @property
    def ended(self) -> bool:
        return self.code is not None

    def feed(self, data: bytes) -> None:
        if self.ended:
            return  # nothing of the tool's follows the trailer
        if self._head is not None:
            data = self._read_head(data)
            if not data:
                return
        self._pending += data
        found = _TRAILER.search(self._pending)
        if found is not None and self._nonce in (None, found.group(1).decode()):
            self.code = int(found.group(2))
            del self._pending[found.start() :]
            self._pass(len(self._pending))
            return
        cut = self._pending.rfind(b"\n")
        held = len(self._pending) - cut if cut >= 0 else 0
        if held > _LONGEST or not _START.startswith(bytes(self._pending[cut : cut + len(_START)])):
            held = 0
        self._pass(len(self._pending) - held)

    def close(self) -> None:
        """The stream ended: what was held back was the tool's."""
        if self._head:
            self._sink(bytes(self._head))  # a first line that was never completed
            self._head = None
        self._pass(len(self._pending))

    def _pass(self, size: int) -> None:
        if size > 0:
            self._sink(bytes(self._pending[:size]))
            del self._pending[:size]

    def _read_head(self, data: bytes) -> bytes:
        assert self._head is not None
        self._head += data
        if len(self._head) < len(_BOUND) and _BOUND.startswith(bytes(self._head)):
            return b""
        if not self._head.startswith(_BOUND):
            rest, self._head = bytes(self._head), None
            return rest  # not a bound warm run's stream: all of it is the tool's
        end = self._head.find(b"\n")
        if end < 0:
            return b""
        line, rest = bytes(self._head[len(_BOUND) : end]), bytes(self._head[end + 1 :])
        self._head = None
        try:
            mark = json.loads(line)
            self.operation = str(mark["operation"])
            self.bound_at = datetime.fromtimestamp(float(mark["at"]), UTC)
        except (ValueError, KeyError, TypeError):
            pass
        return rest
