"""The bus connection against a NATS server that goes silent (packets dropped, no reset:
a partition): the readiness check (``bus.Bus.check``) fails while it is silent and never
breaks the connection itself; and a connection whose peer died silently — it never
passes another byte and is never closed (``TcpGate.strand``) — is noticed and replaced
by the client itself within a bound, by its pings or by checks that get no answer
(issue 31, finding 15: services stayed unready for minutes after a partition, until
they were restarted)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from bus import Bus, BusSettings
from bus.jetstream import SILENT_CHECKS
from tests.support.eventually import assert_eventually
from tests.support.services import require
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.nats


@contextlib.asynccontextmanager
async def gated(**settings: object) -> AsyncIterator[tuple[TcpGate, Bus]]:
    """A bus connected through a gate of the test's (``settings``: ``BusSettings``)."""
    url = require("BH_NATS_URL", "NATS JetStream")
    server = urlsplit(url)
    async with TcpGate(server.hostname or "127.0.0.1", server.port or 4222) as gate:
        through = url.replace(server.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        bus = await Bus.connect(
            BusSettings(url=through, namespace="buscheck", **settings),  # type: ignore[arg-type]
            name="check",
        )
        try:
            yield gate, bus
        finally:
            with contextlib.suppress(Exception):
                await bus.close()


async def _answers(bus: Bus) -> bool:
    try:
        async with asyncio.timeout(0.5):
            await bus.check()
    except (TimeoutError, ConnectionError):
        return False
    return True


async def test_a_check_that_timed_out_leaves_the_connection_working() -> None:
    async with gated() as (gate, bus):
        await bus.check()
        gate.stall()
        for _ in range(SILENT_CHECKS):  # a probe asks every few seconds, bounded by 2 s
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):  # the probe gives up first
                    await bus.check()
        gate.open()
        # the connection answers again (or, the checks having got no answer, the one
        # that replaced it)
        await assert_eventually(lambda: _answers(bus), within=15)
        assert bus.nc.is_connected


async def test_a_connection_whose_peer_died_silently_is_replaced_by_its_pings() -> None:
    """No check runs: the client's own pings notice (``ping_interval`` x
    (``max_outstanding_pings`` + 1), here 1 s x 3) and it reconnects by itself."""
    async with gated(ping_interval=timedelta(seconds=1), max_outstanding_pings=2) as (gate, bus):
        await bus.check()
        reconnects = bus.nc.stats["reconnects"]
        gate.strand()
        stranded = time.monotonic()
        await assert_eventually(lambda: _reconnected(bus, reconnects), within=15)
        assert time.monotonic() - stranded < 10
        await bus.check()


async def test_checks_that_get_no_answer_replace_a_dead_connection() -> None:
    """Pings too rare to help (a minute): the readiness checks, which the probes' watch
    runs every few seconds, reconnect after ``SILENT_CHECKS`` without an answer."""
    async with gated(ping_interval=timedelta(minutes=1)) as (gate, bus):
        await bus.check()
        gate.strand()
        for _ in range(SILENT_CHECKS):
            assert not await _answers(bus)
        await assert_eventually(lambda: _answers(bus), within=10)
        assert bus.nc.stats["reconnects"] >= 1


async def _reconnected(bus: Bus, before: int) -> bool:
    return bus.nc.stats["reconnects"] > before and bus.nc.is_connected
