"""Closing the bus connection while NATS is away: a process that stops because it has
not been ready too long (``webapi.probes``: its NATS connection did not heal) closes
its bus on the way out, and that close must end quietly so the process exits with its
own status (3), not with a traceback from the dead connection (issue 36: a scheduler
cut from NATS in the compose deployment died of ``ConnectionResetError`` in
``Bus.close``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from bus import Bus, BusSettings
from tests.support.eventually import assert_eventually
from tests.support.services import require
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.nats


@contextlib.asynccontextmanager
async def gated() -> AsyncIterator[tuple[TcpGate, Bus]]:
    url = require("BH_NATS_URL", "NATS JetStream")
    server = urlsplit(url)
    async with TcpGate(server.hostname or "127.0.0.1", server.port or 4222) as gate:
        through = url.replace(server.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        yield gate, await Bus.connect(BusSettings(url=through, namespace="busclose"), name="c")


async def _reconnecting(bus: Bus) -> bool:
    return bool(bus.nc.is_reconnecting or bus.nc.is_connecting)


async def test_closing_while_nats_is_away_ends_quietly() -> None:
    async with gated() as (gate, bus):
        await bus.check()
        gate.stall()  # a partition: nothing passes, nothing is reset
        for _ in range(200):  # unsent bytes in the client's buffers
            with contextlib.suppress(Exception):
                await bus.nc.publish("busclose.none", b"x" * 4096)
        gate.shut()
        await bus.nc.force_reconnect()
        await assert_eventually(lambda: _reconnecting(bus), within=10)
        await asyncio.wait_for(bus.close(), timeout=30)
        assert bus.nc.is_closed
