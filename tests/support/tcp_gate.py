"""A loopback TCP forwarder that a test can shut: a partition between a service and one
of its servers (Redis, NATS, the store) without touching the server.

``async with TcpGate(host, port) as gate:`` listens on ``gate.port`` and forwards each
connection to the target; ``gate.shut()`` cuts every open connection and refuses new
ones (they are accepted and closed at once, as a dead peer would look), ``gate.open()``
lets them through again. ``gate.stall()`` keeps the connections but passes no byte (a
peer that went silent: packets dropped, no reset) until ``open()``. ``gate.strand()``
strands the connections open now for good — they never pass another byte and are never
closed (a peer that died silently, or a partition that outlived the connection's NAT
entry) — while new connections flow: a client heals only by noticing and reconnecting.
The gate runs on
an event loop in a thread of its own, so a client that blocks the test's loop (a
synchronous Redis call made on it) still gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

_T = TypeVar("_T")


class TcpGate:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.is_open = True
        #: connections forwarded so far (a client that reconnected made a new one)
        self.forwarded = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()
        self._flowing = threading.Event()
        self._flowing.set()
        #: the writers of stranded connections (both ends): their pumps hold every byte
        self._stranded: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> TcpGate:
        self._thread.start()
        self._server = await self._on_gate(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shut()
        await self._on_gate(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 5)
        self._loop.close()

    async def _close(self) -> None:
        # On the gate's own loop: asyncio's Server is not thread-safe, and closing it from
        # the test's thread raced a connection detaching on the gate's (both woke its
        # waiters: "'NoneType' object is not iterable", seen in a CI run).
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def shut(self) -> None:
        self.is_open = False
        self._loop.call_soon_threadsafe(self._cut)

    def open(self) -> None:
        self.is_open = True
        self._flowing.set()

    def stall(self) -> None:
        self._flowing.clear()

    def strand(self) -> None:
        """Strand every connection open now (see the module doc); new ones flow."""
        self._loop.call_soon_threadsafe(self._strand)

    def _strand(self) -> None:
        self._stranded.update(self._pipes)

    async def _on_gate(self, work: Coroutine[Any, Any, _T]) -> _T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                # stalled: hold the bytes back (a thread's event: polled, not awaited)
                while not self._flowing.is_set():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                while sink in self._stranded:  # noqa: ASYNC110 (never another byte, until the end)
                    await asyncio.sleep(0.05)
                sink.write(data)
                await sink.drain()
        sink.transport.abort()

    def _cut(self) -> None:
        for writer in list(self._pipes):
            writer.transport.abort()
        self._pipes.clear()
        self._stranded.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.is_open:
            writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._pipes.update({writer, upstream_writer})
        self.forwarded += 1
        # the loop's teardown cancels a pipe still open at the end: that ends it too
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pump(reader, upstream_writer), self._pump(upstream_reader, writer)
            )
        for end in (writer, upstream_writer):
            self._pipes.discard(end)
            self._stranded.discard(end)
            end.transport.abort()
