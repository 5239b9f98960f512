"""The request-body limit of both HTTP APIs: a body over it is refused (413) unread.

``BodyLimit`` runs ahead of the router, below the token check. A request whose
``Content-Length`` is over the limit is refused before any of its body is kept. Any
other request's body is counted chunk by chunk as it streams (a chunked body has no
length), and keeping stops at the first chunk past the limit: the server never holds
more than the limit plus one chunk of a body. A body within the limit is handed to the
app whole (one message), so every route — whether it reads its body or not — runs only
with a body within the limit.

**Lingering.** The 413 is sent at once; then, for at most ``linger`` (2 s) and
``linger_bytes`` (64 MiB), the rest of the body is read and *discarded* before the
connection closes. A client that sends its whole body before reading the answer (most
HTTP/1.1 clients, httpx among them) would otherwise have its connection reset by the
unread data and never see the 413. Memory stays flat either way; a body longer than the
linger bounds ends with the connection closed.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contracts import ErrorInfo, PayloadTooLarge
from webapi.errors import error_response

#: The default limit of both APIs (1 MiB): a submission's input is at most a store
#: record (256 KiB by default) and a Hands API body is a few fields.
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
#: The smallest limit a server accepts (a settle or cancel request must fit).
MIN_MAX_BODY_BYTES: Final = 1024
#: After a 413, the rest of the body is read and discarded for at most this long...
LINGER: Final = timedelta(seconds=2)
#: ... and at most this many bytes, so the client sees the answer (see above).
LINGER_BYTES: Final = 64 * 1024 * 1024


class BodyLimit:
    """ASGI middleware: request bodies over ``max_bytes`` are refused with 413."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int = DEFAULT_MAX_BODY_BYTES,
        linger: timedelta = LINGER,
        linger_bytes: int = LINGER_BYTES,
    ) -> None:
        if max_bytes < MIN_MAX_BODY_BYTES:
            raise ValueError(f"the body limit must be at least {MIN_MAX_BODY_BYTES} bytes")
        self.app = app
        self.max_bytes = max_bytes
        self.linger = linger
        self.linger_bytes = linger_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"({declared:,} bytes) is")
            return
        if declared == 0 or (declared is None and not _chunked(scope)):
            await self.app(scope, receive, send)  # no body to read
            return
        body = await self._read(receive)
        if body is None:
            await self._refuse(scope, receive, send, "grew")
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it passes the limit (reading stops)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        info = ErrorInfo(
            code=PayloadTooLarge.code,
            message=f"the request body {why} over this API's limit of {self.max_bytes:,} "
            "bytes; it was refused unread and nothing was done",
            details={"limit": self.max_bytes},
        )
        response = error_response(413, info, {"Connection": "close"})
        await send({"type": "http.response.start", "status": 413, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body, "more_body": True})
        await self._discard(receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _discard(self, receive: Receive) -> None:
        """Read and drop the rest of the body, within the linger bounds."""
        dropped = 0
        try:
            async with asyncio.timeout(self.linger.total_seconds()):
                while dropped <= self.linger_bytes:
                    message = await receive()
                    if message["type"] != "http.request" or not message.get("more_body"):
                        return
                    dropped += len(message.get("body", b""))
        except TimeoutError:
            pass


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself
    return None


def _chunked(scope: Scope) -> bool:
    return any(
        name == b"transfer-encoding" and b"chunked" in value.lower()
        for name, value in scope["headers"]
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read here once, then what the server says."""
    pending = [body]

    async def replayed() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replayed
