"""The Brain's wake consumer on real Redis: it takes no new wake while the event loop
runs behind (a Brain swamped by the drives it already has), and takes them once it
catches up — the leases of the drives it has stay kept, the wakes wait in the queue."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from coordination import redis_client
from coordination.consumer import LAG_LIMIT_S, WakeConsumer
from coordination.wakes import RQWakes
from runtime.cancellation import cancel_and_wait
from tests.support.eventually import assert_eventually
from tests.support.services import require

pytestmark = pytest.mark.redis


async def test_no_wake_is_taken_while_the_loop_runs_behind() -> None:
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    wakes = RQWakes(url, prefix=prefix)
    client = redis_client.connect(url)
    failures = redis_client.connect_sync(url)
    driven: list[str] = []

    async def drive(session_id: str) -> str:
        driven.append(session_id)
        return "driven"

    consumer = WakeConsumer(
        client, failures, prefix=prefix, route=wakes.route, slots=10, drive=drive
    )
    hogging = True

    async def hog() -> None:  # the loop's other work: 0.15 s of CPU at every turn
        while hogging:
            until = time.monotonic() + 1.5 * LAG_LIMIT_S
            while time.monotonic() < until:
                pass
            await asyncio.sleep(0)

    running = asyncio.create_task(consumer.run())
    hogs = asyncio.create_task(hog())
    try:
        await asyncio.sleep(2.5)  # the dequeue under way ends (1 s): the lag is seen
        assert consumer.lag > LAG_LIMIT_S
        for n in range(3):
            await wakes.wake(f"s{n}", reason="test")
        await asyncio.sleep(5)
        assert driven == [], "taken while the loop ran behind"
        hogging = False
        await assert_eventually(lambda: _all(driven, 3), within=10)
    finally:
        hogging = False
        consumer.stop()
        await cancel_and_wait(hogs)
        await running
        wakes.close()
        await client.aclose()
        failures.close()


async def _all(driven: list[str], count: int) -> bool:
    return sorted(driven) == [f"s{n}" for n in range(count)]
