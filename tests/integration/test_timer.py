"""The scheduler's timer on real Redis: it knows when the next delayed wake or lease lapse
is due, and a Brain that adds an earlier one cuts its wait short — so an idle scheduler
waits instead of polling, and a timer due sooner than its longest wait is not late."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis

from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.timer import LONGEST_WAIT, Timer, timer_key
from coordination.wakes import RQWakes, due_key
from scheduler.service import Scheduler
from tests.support.kernel import kernel
from tests.support.services import require

pytestmark = pytest.mark.redis


@dataclass
class Parts:
    client: Redis
    prefix: str
    timer: Timer
    leases: RedisLeases
    wakes: RQWakes


@asynccontextmanager
async def parts() -> AsyncIterator[Parts]:
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    client = redis_client.connect(url)
    leases = RedisLeases(client, prefix=prefix)
    timer = Timer(client, prefix=prefix, due_key=due_key(prefix), held_key=leases.watch_key)
    wakes = RQWakes(url, prefix=prefix)
    try:
        yield Parts(client, prefix, timer, leases, wakes)
    finally:
        wakes.close()
        await client.aclose()


async def test_nothing_due_waits_the_longest_and_a_delayed_wake_signals() -> None:
    async with parts() as p:
        assert await p.timer.next_in() == LONGEST_WAIT
        started = time.monotonic()
        assert not await p.timer.wait(0.3)  # no signal: the whole wait
        assert time.monotonic() - started >= 0.29
        await p.wakes.wake("s1", reason="retry", after=timedelta(seconds=2))
        assert 1.5 < await p.timer.next_in() <= 2.0
        started = time.monotonic()
        assert await p.timer.wait(LONGEST_WAIT)  # the wake signalled
        assert time.monotonic() - started < 0.5
        assert await p.client.llen(timer_key(p.prefix)) == 0


async def test_a_short_lease_signals_and_a_long_one_does_not() -> None:
    async with parts() as p:
        await p.leases.acquire("long", "brain-a", ttl=timedelta(seconds=30))
        assert not await p.timer.wait(0.2)
        assert await p.timer.next_in() == LONGEST_WAIT  # lapses after a look
        await p.leases.acquire("short", "brain-a", ttl=timedelta(seconds=1))
        assert await p.timer.wait(0.2)
        assert 0.5 < await p.timer.next_in() <= 1.0


async def test_a_waiting_scheduler_fires_a_timer_due_before_its_longest_wait(
    tmp_path: Path,
) -> None:
    """The scheduler is asleep for up to ``LONGEST_WAIT`` when a Brain asks for a wake in
    0.5 s: the signal cuts the sleep short and the wake is queued on time."""
    async with parts() as p, kernel(tmp_path) as k:
        scheduler = Scheduler(
            store=k.store, bus=None, wakes=p.wakes, leases=p.leases, timer=p.timer
        )
        running = asyncio.create_task(scheduler.run())
        try:
            await asyncio.sleep(0.5)  # asleep now, with nothing due
            asked = time.monotonic()
            await p.wakes.wake("s1", reason="retry", after=timedelta(seconds=0.5))
            while not scheduler.woken["timer"]:
                assert time.monotonic() - asked < LONGEST_WAIT - 1, "the timer fired late"
                await asyncio.sleep(0.02)
            took = time.monotonic() - asked
        finally:
            await scheduler.shutdown()
            await running
        assert 0.4 < took < 1.5


async def test_the_longest_wait_ends_quietly_on_a_client_with_the_default_read_timeout() -> None:
    """An idle scheduler waits ``LONGEST_WAIT`` at a time on the client every service
    builds (redis-py's read timeout: 5 s by default). The wait must end as a wait, not as
    a read timeout: that was a warning in the scheduler's log every 5 s, a dropped
    connection and a new one (``HELLO`` + ``AUTH``) for each."""
    async with parts() as p:
        started = time.monotonic()
        assert not await p.timer.wait(await p.timer.next_in())
        assert time.monotonic() - started >= LONGEST_WAIT - 1.5
        first = _sockets(p.client)
        assert not await p.timer.wait(LONGEST_WAIT)
        assert _sockets(p.client) == first, "the wait's connection was dropped, another made"


def _sockets(client: Redis) -> set[object]:
    """The local addresses of the client's open connections."""
    pool = client.connection_pool
    return {
        c._writer.get_extra_info("sockname")  # type: ignore[attr-defined]
        for c in [*pool._available_connections, *pool._in_use_connections]
        if c.is_connected
    }
