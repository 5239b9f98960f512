"""Issue 13, defect 11: an idle session's log does not grow with wall-clock time.

A session sleeps for a day under the running system: two Brains consuming wake jobs, and
the scheduler's audit waking every active session nobody holds every 10 minutes — a
simulated day of them, on a fake clock the Brains read. The log grows by a constant
number of commits (the wake-up at the end and the answer), not by one per pass."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome, Sleep
from brain.registry import Registry
from brain.service import BrainService
from contracts import Outcome, utcnow
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.wakes import RQWakes
from scheduler.service import Scheduler
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.integration.test_brain_service import brain
from tests.support.eventually import assert_eventually
from tests.support.kernel import kind
from tests.support.services import require

pytestmark = pytest.mark.redis

PERIOD = timedelta(minutes=10)  # SchedulerSettings().reconcile_every
PASSES = int(timedelta(days=1) / PERIOD)  # 144


class FakeClock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now


async def _nap(ctx: PhaseContext) -> PhaseOutcome:
    return Sleep(until=ctx.now() + timedelta(days=1), next_phase="woken")


async def _woken(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result="rested")


async def test_a_session_asleep_for_a_simulated_day_writes_a_constant_number_of_commits(
    tmp_path: Path,
) -> None:
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    registry = Registry()
    registry.add(kind("nap", {"start": _nap, "woken": _woken}))
    clock = FakeClock()
    wakes = RQWakes(url, prefix=prefix)
    client = redis_client.connect(url)
    leases = RedisLeases(client, prefix=prefix)
    async with AsyncExitStack() as stack:
        brains = [
            await stack.enter_async_context(brain(store, url, prefix, name, registry, clock=clock))
            for name in ("brain-a", "brain-b")
        ]
        await SessionClient(store).submit("s1", "r1", {"task": {"kind": "nap"}})
        await wakes.wake("s1", reason="submission")
        await assert_eventually(lambda: _status(store, "sleeping"), within=20)
        before = (await store.session("s1")).seq
        scheduler = Scheduler(store=store, bus=None, wakes=wakes, leases=leases)
        drives = sum(b.drives for b in brains)
        for _ in range(PASSES + 1):  # one day of audits, and the first past the wake time
            clock.now += PERIOD
            woken = await scheduler.reconcile()
            drives += len(woken)
            await assert_eventually(lambda n=drives: _driven(brains, n), within=10)
        after = await store.session("s1")
    await client.aclose()
    wakes.close()
    await store.close()
    task = after.state.tasks["root.r1"]
    assert task.outcome is Outcome.SUCCEEDED and task.result == "rested", task
    assert scheduler.passes == PASSES + 1 and drives >= PASSES
    # the wake-up past the due time and the answer; never one per pass
    grown = after.seq - before
    print(f"{PASSES + 1} audits, {drives} drives: {grown} commits")
    assert grown <= 3, f"{grown} commits in a simulated day"


async def _status(store: SessionStore, status: str) -> bool:
    task = (await store.session("s1")).state.tasks.get("root.r1")
    return task is not None and task.status.value == status


async def _driven(brains: list[BrainService], count: int) -> bool:
    return sum(b.drives for b in brains) >= count
