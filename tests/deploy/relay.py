"""A TCP relay from the Brains' network of outside services to a server of the test.

The scripted model and the email service (``bh.chaos_services``) listen on this host's
loopback; the Brains, in containers, reach them through a relay listening on the
gateway address of a network of their own (a host address, reachable from the
containers and from nothing outside this machine). The relay remembers which container each
relayed connection came from, by the local port of its connection onward: so a fault
can find the Brain inside an email send from the client port the service saw.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Relay:
    def __init__(self, target_port: int) -> None:
        self._target = target_port
        #: local port of a connection to the target -> address of the client it relays
        self.peers: dict[int, str] = {}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")[0]
        try:
            onward_reader, onward = await asyncio.open_connection("127.0.0.1", self._target)
        except OSError:
            writer.close()
            return
        port = onward.get_extra_info("sockname")[1]
        self.peers[port] = peer
        try:
            await asyncio.gather(_pipe(reader, onward), _pipe(onward_reader, writer))
        finally:
            self.peers.pop(port, None)
            for stream in (writer, onward):
                stream.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


@asynccontextmanager
async def relaying(host: str, target_url: str) -> AsyncIterator[tuple[str, Relay]]:
    """A relay on ``host`` (a free port) to ``target_url``'s loopback port: its URL."""
    relay = Relay(int(target_url.rsplit(":", 1)[1]))
    server = await asyncio.start_server(relay._serve, host, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}", relay
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), timeout=2)
