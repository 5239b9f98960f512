"""A Brain's lease on real Redis: renewal through transient errors, no side effect without
a provable lease, lease losses that are not crashes, and idle wakes that write nothing.

Faults are injected at the lease boundary (``FaultyLeases``: a real ``RedisLeases`` whose
extensions fail as a Redis blip makes them fail) or by freezing the event loop (a
blocking sleep at a crash point: nothing of the Brain runs, as under SIGSTOP)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from brain.context import PhaseContext
from brain.drive import Drive
from brain.outcome import Done, PhaseOutcome, Sleep
from brain.registry import Registry
from brain.runner import SessionRunner
from brain.service import BrainService
from brain.services import Services
from brain.tools import LocalDispatcher, QueryAnswer, ToolSpec
from contracts import LeaseLost, Outcome, StoreUnavailable, utcnow
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.protocols import Lease
from coordination.wakes import RQWakes
from lifecycle.decision import LifecycleSettings
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import kind
from tests.support.services import require

pytestmark = [pytest.mark.redis, pytest.mark.sqlite]


@dataclass
class Faults:
    """Extension failures to inject: the next ``fail_next`` extends fail once each; every
    extend of the first ``doomed_drives`` leases acquired fails (a blip longer than the
    lease)."""

    fail_next: int = 0
    doomed_drives: int = 0
    doomed: set[int] = field(default_factory=set)
    failed: int = 0

    def acquired(self, lease: Lease) -> None:
        if self.doomed_drives > 0:
            self.doomed_drives -= 1
            self.doomed.add(lease.fence)

    def extending(self, lease: Lease) -> None:
        if self.fail_next > 0 or lease.fence in self.doomed:
            self.fail_next = max(0, self.fail_next - 1)
            self.failed += 1
            raise StoreUnavailable("injected: Redis failed to extend the lease")


class FaultyLeases(RedisLeases):
    def __init__(self, client: redis.asyncio.Redis, *, prefix: str, faults: Faults) -> None:
        super().__init__(client, prefix=prefix)
        self.faults = faults

    async def acquire(
        self,
        session_id: str,
        holder: str,
        *,
        ttl: timedelta,
        floor: int = 0,
        claimed: bool = False,
    ) -> Lease | None:
        lease = await super().acquire(session_id, holder, ttl=ttl, floor=floor, claimed=claimed)
        if lease is not None:
            self.faults.acquired(lease)
        return lease

    async def extend(self, lease: Lease, *, ttl: timedelta | None = None) -> Lease:
        self.faults.extending(lease)
        return await super().extend(lease, ttl=ttl)

    async def extend_many(
        self, leases: Sequence[Lease], *, ttl: timedelta
    ) -> list[Lease | LeaseLost]:
        for lease in leases:  # a failed round trip fails the whole batch
            self.faults.extending(lease)
        return await super().extend_many(leases, ttl=ttl)


class Freeze(CrashPoints):
    """At ``point`` (its first occurrence), block the whole event loop for ``seconds``:
    no coroutine of this process runs, as if it were SIGSTOPped."""

    def __init__(self, point: str, seconds: float) -> None:
        super().__init__()
        self.point, self.seconds, self.frozen = point, seconds, 0

    def reached(self, name: str) -> None:
        super().reached(name)
        if name == self.point and not self.frozen:
            self.frozen += 1
            time.sleep(self.seconds)  # the loop itself stops: keeper included


@pytest.fixture
def redis_url() -> str:
    return require("BH_REDIS_URL", "Redis")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield opened
    await opened.close()


def runner(
    store: SessionStore,
    registry: Registry,
    name: str,
    *,
    tools: LocalDispatcher | None = None,
    crash: CrashPoints | None = None,
) -> SessionRunner:
    services = Services(
        store=store,
        tools=tools or LocalDispatcher(),
        crash=crash or CrashPoints(),
        clock=utcnow,
        runner_id=name,
        lifecycle=LifecycleSettings(takeover_margin=timedelta(milliseconds=200)),
    )
    return SessionRunner(store, registry, services, poll_interval=timedelta(milliseconds=50))


@asynccontextmanager
async def brain(
    session_runner: SessionRunner,
    url: str,
    prefix: str,
    *,
    faults: Faults | None = None,
    ttl: float = 1.5,
    run: bool = True,
) -> AsyncIterator[BrainService]:
    client = redis_client.connect(url)
    wakes = RQWakes(url, prefix=prefix)
    service = BrainService(
        runner=session_runner,
        leases=FaultyLeases(client, prefix=prefix, faults=faults or Faults()),
        wakes=wakes,
        redis_url=url,
        concurrency=1,
        lease_ttl=timedelta(seconds=ttl),
        busy_retry=timedelta(milliseconds=50),
    )
    running = asyncio.create_task(service.run()) if run else None
    try:
        yield service
    finally:
        await service.shutdown()
        if running is not None:
            await running
        wakes.close()
        await client.aclose()


@asynccontextmanager
async def waking(url: str, prefix: str, session_id: str) -> AsyncIterator[None]:
    """What the scheduler's reconciler does for a session nobody drives: wake it often."""
    wakes = RQWakes(url, prefix=prefix)

    async def loop() -> None:
        while True:
            await wakes.wake(session_id, reason="test")
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        wakes.close()


async def _answered(store: SessionStore, session_id: str = "s1") -> bool:
    handle = await store.session(session_id)
    submission = await handle.submission("r1")
    return submission is not None and submission.status.is_final


async def _root(store: SessionStore) -> Any:
    handle = await store.session("s1")
    return handle.state.tasks.get("root.r1") or await handle.task("root.r1")


# -- defect 10: one failed extension does not stop renewal ---------------------------------


async def test_one_failed_extension_does_not_stop_renewal(
    store: SessionStore, redis_url: str
) -> None:
    """A 1.5 s lease, a 4 s phase and one extension failing with StoreUnavailable: the
    keeper retries, the lease never lapses, another Brain never takes over, and the
    phase runs once."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    runs: list[str] = []
    started = asyncio.Event()

    async def long_phase(ctx: PhaseContext) -> PhaseOutcome:
        runs.append(ctx.services.runner_id)
        started.set()
        await asyncio.sleep(4)
        return Done(result="done")

    registry = Registry()
    registry.add(kind("long", {"start": long_phase}))
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "long"}})
    faults = Faults(fail_next=1)
    async with brain(runner(store, registry, "brain-a"), redis_url, prefix, faults=faults):
        await RQWakes(redis_url, prefix=prefix).wake("s1", reason="test")
        await asyncio.wait_for(started.wait(), 10)
        async with (
            brain(runner(store, registry, "brain-b"), redis_url, prefix),
            waking(redis_url, prefix, "s1"),
        ):
            await assert_eventually(lambda: _answered(store), within=15)
    assert faults.failed == 1
    assert runs == ["brain-a"]
    root = await _root(store)
    assert root.outcome is Outcome.SUCCEEDED and root.crashes == 0


async def test_leases_lost_to_blips_are_not_crashes(store: SessionStore, redis_url: str) -> None:
    """Three Redis blips, each longer than the lease, during a long phase: each time the
    holder stops and another drive takes over, but a lease lost while its holder lives is
    not a crash, so the restart limit (3) is not reached and the task succeeds."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    runs: list[str] = []

    async def long_phase(ctx: PhaseContext) -> PhaseOutcome:
        runs.append(ctx.services.runner_id)
        if len(runs) <= 3:
            await asyncio.sleep(60)  # the blip ends this drive's lease first
        return Done(result="done")

    registry = Registry()
    registry.add(kind("long", {"start": long_phase}, max_crashes=3))
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "long"}})
    faults = Faults(doomed_drives=3)
    runners = [runner(store, registry, "brain-a"), runner(store, registry, "brain-b")]
    async with (
        brain(runners[0], redis_url, prefix, faults=faults, ttl=1),
        brain(runners[1], redis_url, prefix, faults=faults, ttl=1),
        waking(redis_url, prefix, "s1"),
    ):
        await assert_eventually(lambda: _answered(store), within=20)
    root = await _root(store)
    assert len(runs) == 4
    # each lost lease is counted by the Brain that lost it, and its drive as lease_lost
    registries = [each.services.metrics.registry for each in runners]
    lost = sum(
        r.get_sample_value("brainhands_brain_leases_lost_total", {"reason": reason}) or 0
        for r in registries
        for reason in ("lapsed", "taken")
    )
    dropped = sum(
        r.get_sample_value("brainhands_brain_drives_total", {"outcome": "lease_lost"}) or 0
        for r in registries
    )
    assert lost == dropped == 3, (lost, dropped)
    assert root.outcome is Outcome.SUCCEEDED, root.error
    assert root.crashes == 0


# -- defect 11: an idle wake writes nothing ------------------------------------------------


async def test_idle_wakes_by_alternating_brains_write_nothing(
    store: SessionStore, redis_url: str
) -> None:
    """A session that only sleeps, woken 20 times by two Brains in turn: no claim, no
    commit — the log does not grow with wall-clock time."""
    prefix = f"t{uuid.uuid4().hex[:8]}"

    async def nap(ctx: PhaseContext) -> PhaseOutcome:
        return Sleep(until=ctx.now() + timedelta(days=1), next_phase="start")

    registry = Registry()
    registry.add(kind("nap", {"start": nap}))
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "nap"}})
    async with (
        brain(runner(store, registry, "brain-a"), redis_url, prefix, run=False) as a,
        brain(runner(store, registry, "brain-b"), redis_url, prefix, run=False) as b,
    ):
        await a.drive("s1")  # to sleep
        before = (await store.session("s1")).seq
        for number in range(20):
            await (a if number % 2 else b).drive("s1")
        after = await store.session("s1")
    assert after.state.tasks["root.r1"].status.value == "sleeping"
    assert after.seq == before, f"{after.seq - before} commits by 20 idle wakes"


async def test_a_commit_landing_between_load_and_claim_does_not_fail_the_drive(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission (or a cancel) commits between the drive's load and its claim: the
    claim meets the taken seq, catches up and claims again (the chaos run saw the
    ConflictError escape through the wake job instead)."""

    async def answer(ctx: PhaseContext) -> PhaseOutcome:
        return Done(result="ok")

    registry = Registry()
    registry.add(kind("answer", {"start": answer}))
    client = SessionClient(store)
    await client.submit("s1", "r1", {"task": {"kind": "answer"}})
    real = Drive._write_claim
    landed: list[bool] = []

    async def after_a_submission(drive: Drive, fence: int, holder: str) -> None:
        if not landed:
            landed.append(True)
            await client.submit("s1", "r2", {"task": {"kind": "answer"}})
        await real(drive, fence, holder)

    monkeypatch.setattr(Drive, "_write_claim", after_a_submission)
    report = await runner(store, registry, "brain-a").drive("s1", fence=1)
    assert landed and not report.fenced
    state = (await store.session("s1")).state
    assert {t.outcome for t in state.tasks.values()} == {Outcome.SUCCEEDED}, state.tasks


# -- defect 20: no request leaves once the lease cannot be proven ---------------------------


async def test_a_brain_frozen_between_attempt_and_send_does_not_send(
    store: SessionStore, redis_url: str
) -> None:
    """Brain A records the attempt of an unsafe call, then freezes (its whole event loop)
    past its lease TTL before the request leaves. When it resumes, the request must not
    leave: A can no longer prove its lease. A later holder recovers the operation (query:
    not found, then the call) and it is sent exactly once."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    sent: list[str] = []

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        sent.append(operation_id)
        return {"sent": True}

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        return QueryAnswer(found=operation_id in sent, output={"sent": True})

    async def mail(ctx: PhaseContext) -> PhaseOutcome:
        await ctx.operation("send", {"to": "x@example.com"}, "mail")
        return Done(result="sent")

    tools = LocalDispatcher()
    tools.register(ToolSpec(name="send", timeout=timedelta(seconds=1)), send, query)
    registry = Registry()
    registry.add(kind("mail", {"start": mail}))
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "mail"}})
    frozen = runner(store, registry, "brain-a", tools=tools, crash=Freeze("call:before:send", 1.6))
    async with brain(frozen, redis_url, prefix, ttl=1, run=False) as a:
        await asyncio.wait_for(a.drive("s1"), 20)
    assert sent == [], "the frozen Brain sent its request after its lease lapsed"
    async with (
        brain(runner(store, registry, "brain-b", tools=tools), redis_url, prefix, ttl=1),
        waking(redis_url, prefix, "s1"),
    ):
        await assert_eventually(lambda: _answered(store), within=20)
    assert len(sent) == 1
