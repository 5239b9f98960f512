"""The readiness check of a bus connection (``bus.Bus.check``) against a NATS server that
goes silent (packets dropped, no reset: a partition) and comes back: the check fails
while it is silent, and the connection works again afterwards — the check itself must
not break it."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import pytest

from bus import Bus, BusSettings
from tests.support.services import require
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.nats


async def test_a_check_that_timed_out_leaves_the_connection_working() -> None:
    url = require("BH_NATS_URL", "NATS JetStream")
    server = urlsplit(url)
    async with TcpGate(server.hostname or "127.0.0.1", server.port or 4222) as gate:
        gated = url.replace(server.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        bus = await Bus.connect(BusSettings(url=gated, namespace="buscheck"), name="check")
        try:
            await bus.check()
            gate.stall()
            for _ in range(2):  # a readiness probe asks every few seconds, bounded by 2 s
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):  # the probe gives up first
                        await bus.check()
            gate.open()
            await asyncio.sleep(0.5)
            async with asyncio.timeout(10):
                await bus.check()  # the same connection answers again
            assert bus.nc.is_connected
        finally:
            with contextlib.suppress(Exception):
                await bus.close()
