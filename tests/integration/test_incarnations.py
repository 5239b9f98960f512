"""Liveness evidence of Brain incarnations on real Redis: certain on this host, a beat
within a window elsewhere (``coordination.incarnations``)."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator

import pytest

from coordination import redis_client
from coordination.incarnations import RedisIncarnations
from runtime.incarnation import start_ticks, this_process
from tests.support.services import require

pytestmark = pytest.mark.redis


@pytest.fixture
async def incarnations() -> AsyncIterator[RedisIncarnations]:
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    yield RedisIncarnations(client, prefix=f"t{uuid.uuid4().hex[:8]}")
    await client.aclose()


def _identity_of(process: asyncio.subprocess.Process) -> str:
    """``this_process()`` as seen from inside another process: ours, with its pid and
    start time."""
    mine = this_process().split(":")
    started = start_ticks(process.pid)
    assert started is not None
    return ":".join([*mine[:3], str(process.pid), str(started)])


async def test_a_holder_on_this_host_is_alive_until_its_process_is_gone(
    incarnations: RedisIncarnations,
) -> None:
    """Same kernel and pid namespace: certain, no waiting — a stopped process is alive,
    an exited one is gone (a real crash, counted towards the restart limit)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    try:
        await incarnations.beat("brain-x", _identity_of(process))
        process.send_signal(signal.SIGSTOP)  # frozen, not dead
        assert await incarnations.alive("brain-x", window=30)
    finally:
        process.kill()
        await process.wait()
    assert not await incarnations.alive("brain-x", window=30)


async def test_a_holder_elsewhere_is_alive_while_it_beats(
    incarnations: RedisIncarnations,
) -> None:
    """Another host (its process cannot be looked at): a beat within the window proves
    it alive; no beat within the window counts as gone."""
    elsewhere = "host:other-host:4242"
    await incarnations.beat("brain-y", elsewhere)

    async def beating() -> None:
        for _ in range(10):
            await asyncio.sleep(0.05)
            await incarnations.beat("brain-y", elsewhere)

    beats = asyncio.create_task(beating())
    assert await incarnations.alive("brain-y", window=1)
    await beats
    assert not await incarnations.alive("brain-y", window=0.3)


async def test_a_record_lost_to_a_flushall_reappears_with_the_next_beat(
    incarnations: RedisIncarnations,
) -> None:
    """No record (Redis lost its data): the live holder's next beat within the window
    proves it alive; a holder that never beats again is gone."""

    async def late_beat() -> None:
        await asyncio.sleep(0.1)
        await incarnations.beat("brain-z", "host:other-host:4243")

    beat = asyncio.create_task(late_beat())
    assert await incarnations.alive("brain-z", window=1)
    await beat
    assert not await incarnations.alive("brain-never", window=0.2)
