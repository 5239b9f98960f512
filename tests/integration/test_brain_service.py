"""Brain workers on real Redis and RQ: wake jobs, fenced leases, no lost wake-up.

The tests that depend on the store's guarantees (claims, fencing, reloads after a wake)
run on every backend: SQLite, S3 and DynamoDB (the ``location`` fixture)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome
from brain.registry import Registry
from brain.service import BrainService
from brain.tools import LocalDispatcher
from contracts import Outcome, SubmissionStatus, utcnow
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.wakes import RQWakes, wake_queue
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import Kernel, kind
from tests.support.services import require
from tests.support.stores import StoreLocation
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.redis


async def _echo(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result={"echo": ctx.input})


@asynccontextmanager
async def brain(
    store: SessionStore,
    url: str,
    prefix: str,
    name: str,
    registry: Registry,
    *,
    clock: Callable[[], datetime] = utcnow,
    concurrency: int = 2,
) -> AsyncIterator[BrainService]:
    client = redis_client.connect(url)
    kernel = Kernel(store, registry, LocalDispatcher(), SessionClient(store))
    runner = kernel.runner(name, clock=clock)
    wakes = RQWakes(url, prefix=prefix)
    service = BrainService(
        runner=runner,
        leases=RedisLeases(client, prefix=prefix),
        wakes=wakes,
        redis_url=url,
        concurrency=concurrency,
        lease_ttl=timedelta(seconds=2),
    )
    running = asyncio.create_task(service.run())
    try:
        yield service
    finally:
        await service.shutdown()
        await running
        wakes.close()
        await client.aclose()


@pytest.fixture
def redis_url() -> str:
    return require("BH_REDIS_URL", "Redis")


async def test_a_submission_woken_on_rq_is_driven_to_its_answer(
    location: StoreLocation, redis_url: str
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    registry = Registry()
    registry.add(kind("echo", {"start": _echo}))
    client = SessionClient(store)
    wakes = RQWakes(redis_url, prefix=prefix)
    async with brain(store, redis_url, prefix, "brain-a", registry):
        for number in range(5):
            await client.submit(f"s{number}", "r1", {"task": {"kind": "echo", "input": number}})
            await wakes.wake(f"s{number}", reason="submission")
        await assert_eventually(lambda: _all_answered(store, 5), within=30)
    sync = redis_client.connect_sync(redis_url)
    queue = wake_queue(prefix, "default", sync)
    origins = {sync.hget(key, "origin") for key in sync.keys("rq:job:wake-s*")}
    assert queue.count == 0 and queue.name.encode() not in origins  # taken, nothing left
    assert sync.keys(f"{prefix}:wake:pending:*") == []
    sync.close()
    wakes.close()


async def test_a_wake_during_a_drive_is_not_lost(location: StoreLocation, redis_url: str) -> None:
    """A submission lands while its session is being driven (the wake's marker was
    already taken): it is answered promptly, with no reconciler running."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    inside, go_on = asyncio.Event(), asyncio.Event()

    async def slow(ctx: PhaseContext) -> PhaseOutcome:
        if ctx.input == "first":
            inside.set()
            await go_on.wait()
        return Done(result=ctx.input)

    registry = Registry()
    registry.add(kind("slow", {"start": slow}))
    client = SessionClient(store)
    wakes = RQWakes(redis_url, prefix=prefix)
    async with brain(store, redis_url, prefix, "brain-a", registry):
        await client.submit("s1", "r1", {"task": {"kind": "slow", "input": "first"}})
        await wakes.wake("s1", reason="submission")
        await asyncio.wait_for(inside.wait(), 20)
        await client.submit("s1", "r2", {"task": {"kind": "slow", "input": "second"}})
        await wakes.wake("s1", reason="submission")  # arrives while s1 is driven
        go_on.set()
        await assert_eventually(lambda: _answered(store, "s1", "r2"), within=5)
    wakes.close()


async def test_a_brain_woken_again_for_a_session_it_claimed_writes_no_second_claim(
    location: StoreLocation, redis_url: str
) -> None:
    """The tool path's second wake (the result) reaches the Brain that claimed the
    session on the first and released it since: nobody took the lease meanwhile, so it
    gets its fence back and writes no claim; one load of the session per wake."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    registry = Registry()
    registry.add(kind("echo", {"start": _echo}))
    client = SessionClient(store)
    wakes = RQWakes(redis_url, prefix=prefix)
    loads: list[str] = []
    async with brain(store, redis_url, prefix, "brain-a", registry) as service:
        loading, test = service.runner.store.session, asyncio.current_task()

        async def counted(session_id: str) -> Any:
            if asyncio.current_task() is not test:  # the Brain's, not this test's polls
                loads.append(session_id)
            return await loading(session_id)

        service.runner.store.session = counted  # type: ignore[method-assign]
        for request in ("r1", "r2", "r3"):
            await client.submit("s1", request, {"task": {"kind": "echo", "input": request}})
            await wakes.wake("s1", reason="submission")
            await assert_eventually(lambda r=request: _answered(store, "s1", r), within=20)
            await assert_eventually(lambda: _free(service.leases, "s1"), within=5)
    claims = [c for c in await store.commits("s1") if c.claim]
    assert [(c.fence, c.holder) for c in claims] == [(1, service.holder)]
    # a drive's report is kept after its lease's release: wait for the last one
    await assert_eventually(lambda: _reported(service, "s1", len(loads)), within=5)
    wakes.close()


async def test_a_brain_that_finds_nothing_to_do_takes_no_lease_and_no_fence(
    location: StoreLocation, redis_url: str
) -> None:
    """Brain B is woken for a session Brain A claimed and finds nothing to do: it looks
    without leasing (nothing to write needs no fence), so A's next wake gets its fence
    back and writes no second claim (the console showed one claim per email)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    registry = Registry()
    registry.add(kind("echo", {"start": _echo}))
    client = SessionClient(store)
    async with (
        brain(store, redis_url, prefix, "brain-a", registry) as a,
        brain(store, redis_url, prefix, "brain-b", registry) as b,
    ):
        redis = redis_client.connect(redis_url)
        await client.submit("s1", "r1", {"task": {"kind": "echo", "input": 1}})
        await a.drive("s1")
        for _ in range(3):
            said = await b.drive("s1")  # a late or duplicated wake: nothing to do
            assert "0 commits" in said, said
        await client.submit("s1", "r2", {"task": {"kind": "echo", "input": 2}})
        await a.drive("s1")
        assert await _answered(store, "s1", "r2")
        counter = await redis.get(RedisLeases(redis, prefix=prefix).fence_key("s1"))
        await redis.aclose()
    claims = [c for c in await store.commits("s1") if c.claim]
    assert [(c.fence, c.holder) for c in claims] == [(1, a.holder)]
    assert int(counter) == 1, "an idle look consumed no fence"


async def test_a_newer_lease_holder_fences_out_the_older_one(
    location: StoreLocation, redis_url: str
) -> None:
    """Brain A's lease lapses mid-phase (as after a SIGSTOP); Brain B takes the session
    with a higher fence and claims it; A's late outcome is refused by the store."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    stuck, release = asyncio.Event(), asyncio.Event()

    async def phase(ctx: PhaseContext) -> PhaseOutcome:
        if ctx.services.runner_id == "brain-a":
            stuck.set()
            await release.wait()
            return Done(result="from A")
        return Done(result="from B")

    registry = Registry()
    registry.add(kind("race", {"start": phase}))
    client = SessionClient(store)
    leases_client = redis_client.connect(redis_url)
    leases = RedisLeases(leases_client, prefix=prefix)
    runner_a = Kernel(store, registry, LocalDispatcher(), client).runner("brain-a")
    runner_b = Kernel(store, registry, LocalDispatcher(), client).runner("brain-b")
    await client.submit("s1", "r1", {"task": {"kind": "race"}})
    lease_a = await leases.acquire("s1", "brain-a", ttl=timedelta(milliseconds=300))
    assert lease_a is not None
    drive_a = asyncio.create_task(runner_a.drive("s1", fence=lease_a.fence))
    await asyncio.wait_for(stuck.wait(), 10)
    # A is "stopped": its lease lapses, B acquires a higher fence and drives.
    await assert_eventually(lambda: _free(leases, "s1"), within=5)
    handle = await store.session("s1")
    lease_b = await leases.acquire("s1", "brain-b", ttl=timedelta(seconds=5), floor=handle.fence)
    assert lease_b is not None and lease_b.fence > lease_a.fence
    report_b = await runner_b.drive("s1", fence=lease_b.fence)
    assert not report_b.fenced
    release.set()  # A "resumes": its next commit is refused, it drops the session
    report_a = await asyncio.wait_for(drive_a, 10)
    assert report_a.fenced
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.result == "from B" and task.outcome is Outcome.SUCCEEDED
    await leases_client.aclose()


async def _reported(service: BrainService, session_id: str, count: int) -> bool:
    return len([r for r in service.reports if r.session_id == session_id]) == count


async def _free(leases: RedisLeases, session_id: str) -> bool:
    return await leases.holder(session_id) is None


async def _answered(store: SessionStore, session_id: str, request_id: str) -> bool:
    handle = await store.session(session_id)
    submission = await handle.submission(request_id)
    return submission is not None and submission.status is SubmissionStatus.ANSWERED


async def _all_answered(store: SessionStore, count: int) -> bool:
    for number in range(count):
        if not await _answered(store, f"s{number}", "r1"):
            return False
    return True


@pytest.mark.sqlite  # the Brain's own bookkeeping: one backend is enough
async def test_one_brain_never_drives_a_session_twice_at_once(
    tmp_path: Path, redis_url: str
) -> None:
    """Found by the long chaos run: two wake jobs of one session reached two slots of one
    Brain; its lease (same holder) let both drive, and a phase's stale outcome was
    refused (already applied), failing the task. A session is driven once per Brain."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    inside, go_on = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    async def slow(ctx: PhaseContext) -> PhaseOutcome:
        runs.append(ctx.task.id)
        inside.set()
        await go_on.wait()
        return Done(result="done")

    registry = Registry()
    registry.add(kind("slow", {"start": slow}))
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "slow"}})
    async with brain(store, redis_url, prefix, "brain-a", registry) as service:
        first = asyncio.create_task(service.drive("s1"))
        await asyncio.wait_for(inside.wait(), 10)
        second = await asyncio.wait_for(service.drive("s1"), 5)
        go_on.set()
        assert second.startswith("busy") and "fence" in await first
    assert runs == ["root.r1"]
    await store.close()


async def test_the_wake_consumer_takes_wakes_again_once_redis_is_back(
    tmp_path: Path, redis_url: str
) -> None:
    """Redis goes away as a drive ends (a restart under load): the consumer's dequeue
    fails, and it tries again (0.5 s doubling to 5 s) until Redis is back, then takes
    wakes as before. (With RQ's worker in a thread per slot, an error outside the dequeue
    ended the slot's loop, which then had to be restarted.)"""
    redis = urlsplit(redis_url)
    async with TcpGate(redis.hostname or "127.0.0.1", redis.port or 6379) as gate:
        gated = redis_url.replace(redis.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")

        async def cut_off(ctx: PhaseContext) -> PhaseOutcome:
            gate.shut()  # the drive ends with Redis gone: the next dequeue fails
            return Done(result={"echo": ctx.input})

        prefix = f"t{uuid.uuid4().hex[:8]}"
        store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
        registry = Registry()
        registry.add(kind("cut", {"start": cut_off}))
        registry.add(kind("echo", {"start": _echo}))
        client = SessionClient(store)
        wakes = RQWakes(redis_url, prefix=prefix)
        async with brain(store, gated, prefix, "brain-a", registry) as service:
            await assert_eventually(lambda: _holds_route(service), within=15)
            await client.submit("s-cut", "r1", {"task": {"kind": "cut", "input": 1}})
            await wakes.wake("s-cut", reason="submission")
            await assert_eventually(lambda: _all_answered_ids(store, ["s-cut"]), within=30)
            await asyncio.sleep(3)  # the consumer meets the closed gate, and retries
            gate.open()
            await client.submit("s-after", "r1", {"task": {"kind": "echo", "input": 2}})
            await wakes.wake("s-after", reason="submission")
            await assert_eventually(lambda: _all_answered_ids(store, ["s-after"]), within=30)
            assert await _holds_route(service)
        wakes.close()
        await store.close()


async def _holds_route(service: BrainService) -> bool:
    try:
        await service.holds_its_route()
    except RuntimeError:
        return False
    return True


async def _all_answered_ids(store: SessionStore, sessions: list[str]) -> bool:
    for session_id in sessions:
        submission = await (await store.session(session_id)).submission("r1")
        if submission is None or submission.status is not SubmissionStatus.ANSWERED:
            return False
    return True


async def test_shutdown_waits_for_running_drives_once_not_once_per_slot(
    tmp_path: Path, redis_url: str
) -> None:
    """SIGTERM with every slot inside a drive that does not end: the Brain waits its
    drain time once for all of them, then hands its leases back and exits. (It waited
    the drain time per slot in turn: under load, 30 s after SIGTERM a compose Brain was
    still waiting, and was killed with its leases held.)"""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    inside: list[str] = []
    release = asyncio.Event()

    async def stuck(ctx: PhaseContext) -> PhaseOutcome:
        inside.append(ctx.session_id)
        await release.wait()
        return Done(result="late")

    registry = Registry()
    registry.add(kind("stuck", {"start": stuck}))
    sessions = [f"s{n}" for n in range(4)]
    wakes = RQWakes(redis_url, prefix=prefix)
    try:
        async with brain(store, redis_url, prefix, "brain-a", registry, concurrency=4) as service:
            service.drain = timedelta(seconds=2)
            for session in sessions:
                await SessionClient(store).submit(session, "r1", {"task": {"kind": "stuck"}})
                await wakes.wake(session, reason="submission")
            await assert_eventually(lambda: _all_inside(inside, sessions), within=30)
            started = time.monotonic()
            await asyncio.wait_for(service.shutdown(), 30)
            took = time.monotonic() - started
            release.set()
        assert took < 6, f"shutdown took {took:.1f} s with a 2 s drain"
    finally:
        release.set()
        wakes.close()
        await store.close()


async def _all_inside(inside: list[str], sessions: list[str]) -> bool:
    return sorted(inside) == sorted(sessions)


async def test_an_idle_brain_costs_one_blocking_dequeue_a_second_whatever_its_slots(
    tmp_path: Path, redis_url: str
) -> None:
    """One consumer per Brain: an idle Brain of 6 slots holds one blocked dequeue (a 1 s
    wait, short so that a frozen Brain cannot take jobs for long), not one per slot, and
    writes no bookkeeping between them; a shutdown ends it within that wait."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    registry = Registry()
    registry.add(kind("echo", {"start": _echo}))
    sync = redis_client.connect_sync(redis_url)
    try:
        async with brain(store, redis_url, prefix, "brain-a", registry, concurrency=6) as service:
            await assert_eventually(lambda: _blocked(sync, service), within=20)
            assert await asyncio.to_thread(_blocking, sync, service) == 1
            assert not sync.keys(f"rq:worker:{service.holder}*"), "no RQ worker to renew"
            started = time.monotonic()
            await asyncio.wait_for(service.shutdown(), 30)
            took = time.monotonic() - started
        assert took < 3, f"shutdown took {took:.1f} s: the blocking dequeue held it"
        assert not service.consumer.running
    finally:
        sync.close()
        await store.close()


def _blocking(sync: Any, service: BrainService) -> int:
    """Blocked connections of this Brain's consumer. Client names are server-wide: side
    by side, another worker's test runs a Brain of the same name on its own database."""
    clients = sync.client_list(_type="normal")
    name = f"{service.holder}.wakes"
    database = str(sync.connection_pool.connection_kwargs.get("db", 0))
    return len(
        [
            c
            for c in clients
            if c.get("name") == name and "b" in c["flags"] and str(c.get("db")) == database
        ]
    )


async def _blocked(sync: Any, service: BrainService) -> bool:
    """The Brain's consumer connection is blocked in a dequeue."""
    return await asyncio.to_thread(_blocking, sync, service) >= 1
