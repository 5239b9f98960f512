"""The attempt an in-process tool call runs under, proved again as its request leaves.

An in-process tool's request to a service *is* the operation's action. The Brain proves
its lease and the attempt's deadline just before it calls the tool
(``brain.operations``), but a tool awaits things before its request's first byte is
written — a connection from a pool, a TLS handshake, the other requests of a fan-out —
and a freeze there (SIGSTOP, a VM paused, a long GC) lets the request leave after the
lease lapsed and after another Brain has verified the operation as not done and sent it
again. So the last proof belongs where the request is written:

- ``Attempt.current()`` tells the tool code what attempt it runs under (a context
  variable the Brain sets around the call): the operation id, the attempt's deadline on
  the store's clock, and ``prove``.
- ``AttemptTransport`` is an httpx transport for tool authors: a request made under an
  attempt is proved again at httpcore's ``send_request_headers.started`` event — after
  the connection is ready, immediately before the first byte is written, with no await
  in between that could let another task run — and carries the attempt's fence
  (``contracts.attempt``: the operation id and the deadline), so that the service can
  refuse it if it still arrives late. A request made outside an attempt passes as is.

A proof that fails raises the Brain's ``RecoveryPending`` out of the tool's request:
nothing was written, and the phase is retried by the next lease holder.
``docs/operations.md`` gives the window that remains (bench: ``python -m bench.attempt``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from contracts.attempt import AttemptFence

#: the events at which httpcore is about to write a request (HTTP/1.1 and HTTP/2)
_WRITING = frozenset({"http11.send_request_headers.started", "http2.send_request_headers.started"})

_CURRENT: ContextVar[Attempt | None] = ContextVar("brainhands_attempt", default=None)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of an operation, as the tool call made under it sees it."""

    operation_id: str
    #: the attempt's deadline on the store's clock (None: a tool run outside the kernel)
    deadline: datetime | None
    #: raises (``RecoveryPending``) unless the lease and the attempt are still provably
    #: this process's: no I/O, safe to call at any moment
    prove: Callable[[], None]

    @staticmethod
    def current() -> Attempt | None:
        """The attempt the calling tool code runs under, if any."""
        return _CURRENT.get()

    @contextlib.contextmanager
    def running(self) -> Iterator[Attempt]:
        """Make this the current attempt for the code run inside (the tool's call)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def fence(self) -> AttemptFence | None:
        if self.deadline is None:
            return None
        return AttemptFence(operation_id=self.operation_id, deadline=self.deadline)


class AttemptTransport(httpx.AsyncBaseTransport):
    """An httpx transport that proves the current attempt at the last moment before a
    request is written, and sends the attempt's fence with it. Use it as a tool's
    client transport: ``httpx.AsyncClient(transport=AttemptTransport())`` (``inner``:
    the transport it wraps, by default httpx's own)."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempt = Attempt.current()
        if attempt is not None:
            fence = attempt.fence()
            if fence is not None:
                request.headers.update(fence.headers())
            request.extensions["trace"] = _proving(attempt, request.extensions.get("trace"))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _proving(
    attempt: Attempt, traced: Callable[[str, dict[str, Any]], Awaitable[None]] | None
) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """A trace callback proving ``attempt`` as the request's headers are about to be
    written (after any callback the request already had)."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if traced is not None:
            await traced(event, info)
        if event in _WRITING:
            attempt.prove()

    return trace
