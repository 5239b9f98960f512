"""The distributed path on real Redis, RQ and NATS: a Brain service lets go of a session
waiting on the Hands; the scheduler turns the result into a wake; a Brain applies it —
with the reconciler off, so nothing but the result event can bring it home. Every test
runs on each store backend (SQLite, S3, DynamoDB: the ``location`` fixture)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats.js.errors
import pytest
from prometheus_client import generate_latest

from brain.context import PhaseContext
from brain.outcome import Done, Effects, PhaseOutcome, Sleep, Wait
from brain.registry import Registry
from brain.runner import SessionRunner
from brain.service import BrainService
from brain.tools import LocalDispatcher
from bus import DISPATCH_STREAM, RESULTS_STREAM, Bus, result_subject
from contracts import SubmissionStatus, TaskStatus, utcnow
from contracts.question import Question
from contracts.tool import ResultEvent
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.timer import Timer
from coordination.wakes import RQWakes, due_key, wake_queue
from hands.sandbox.process import ProcessSandbox
from scheduler.metrics import SchedulerMetrics
from scheduler.service import CONSUMER, Scheduler, SchedulerSettings
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import kind
from tests.support.services import require
from tests.support.stores import StoreLocation, new_location
from tests.support.toolpath import brain_services, ledger_tool, running_hands, runs, scratch_bus

pytestmark = [pytest.mark.redis, pytest.mark.nats]

LOSS_DB = 6  # emptied by FLUSHDB in the data-loss test; nothing else may live there


@dataclass
class System:
    store: SessionStore
    client: SessionClient
    wakes: RQWakes
    bus: Bus
    ledger: Path
    brain: BrainService
    scheduler: Scheduler


async def _call(ctx: PhaseContext) -> PhaseOutcome:
    performed = await ctx.operation("act", {"sleep": float(ctx.input or 0)}, "act")
    return Done(
        result=performed.output, effects=Effects(applied_operations=(performed.operation_id,))
    )


@asynccontextmanager
async def system(
    tmp_path: Path,
    location: StoreLocation,
    registry: Registry,
    *,
    reconcile_every: timedelta | None = None,
    redis_db: int | None = None,
    hands: bool = True,
    watch_after: timedelta = timedelta(seconds=30),
    **settings: Any,
) -> AsyncIterator[System]:
    """``settings``: more ``SchedulerSettings`` (those this version has); ``hands``:
    False to start the Hands in the test itself."""
    url = require("BH_REDIS_URL", "Redis")
    if redis_db is not None:
        url = on_db(url, redis_db)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    ledger = tmp_path / "ledger"
    tools = LocalDispatcher()
    tools.add_sandboxed(await store.tools.register(ledger_tool("act", ledger)))
    client = redis_client.connect(url)
    leases = RedisLeases(client, prefix=prefix)
    wakes = RQWakes(url, prefix=prefix)
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus, "brain-1"))
        brain = BrainService(
            runner=runner,
            leases=leases,
            wakes=wakes,
            redis_url=url,
            concurrency=2,
            lease_ttl=timedelta(seconds=3),
            **_known(BrainService.__init__, watch_after=watch_after),
        )
        timer = Timer(client, prefix=prefix, due_key=due_key(prefix), held_key=leases.watch_key)
        scheduler = Scheduler(
            store=store,
            bus=bus,
            wakes=wakes,
            leases=leases,
            # off by default: only result events wake
            settings=SchedulerSettings(
                reconcile_every=reconcile_every,
                **{k: v for k, v in settings.items() if k in SchedulerSettings.model_fields},
            ),
            **_known(Scheduler.__init__, timer=timer),  # waits for timers, as deployed
        )
        tasks = [asyncio.create_task(brain.run()), asyncio.create_task(scheduler.run())]
        try:
            # The scheduler's first audit wakes every active session nobody holds: a test
            # starts after it, or the audit may wake what the test submits (CI, stop 32).
            await assert_eventually(lambda: _audited(scheduler), within=30)
            if not hands:
                yield System(store, SessionClient(store), wakes, bus, ledger, brain, scheduler)
            else:
                async with running_hands(store, ProcessSandbox(tmp_path / "runs"), bus):
                    yield System(store, SessionClient(store), wakes, bus, ledger, brain, scheduler)
        finally:
            try:
                await scheduler.shutdown()
                await brain.shutdown()
                await asyncio.gather(*tasks)
            finally:  # on a failed test too: the next test's GC would report them
                wakes.close()
                await client.aclose()


async def test_a_result_event_wakes_a_brain_that_applies_it(
    tmp_path: Path, location: StoreLocation
) -> None:
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    async with system(tmp_path, location, registry) as s:
        await s.client.submit("s1", "r1", {"task": {"kind": "caller", "input": 0.2}})
        await s.wakes.wake("s1", reason="submission")
        await assert_eventually(lambda: _answered(s.store, "s1", "r1"), within=20)
    assert len(runs(s.ledger)) == 1
    assert any(report.awaiting for report in s.brain.reports)  # it let go while waiting


@pytest.mark.sqlite  # the store only answers "is there such a result": one backend
async def test_a_result_event_the_store_does_not_back_is_refused_counted_and_wakes_nothing(
    tmp_path: Path, location: StoreLocation
) -> None:
    """Anyone who can publish on the bus can send a result event; the scheduler asks the
    store, finds no such result, drops the event without a wake and counts it in
    ``brainhands_scheduler_refused_total{door="results", reason="not_backed"}``. A real
    result behind it still wakes."""
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    async with system(tmp_path, location, registry) as s:
        await s.client.submit("s1", "r1", {"task": {"kind": "caller", "input": 0.2}})
        forged = ResultEvent(operation_id="op-forged", session_id="s1", succeeded=True)
        await s.bus.publish(result_subject("s1"), forged, msg_id="forged-1")
        await assert_eventually(lambda: _refused(s.scheduler), within=20)
        assert s.scheduler.woken["result"] == 0  # the forged event woke nobody
        exported = SchedulerMetrics(s.scheduler).registry
        sample = {"door": "results", "reason": "not_backed"}
        assert exported.get_sample_value("brainhands_scheduler_refused_total", sample) == 1
        await s.wakes.wake("s1", reason="submission")
        await assert_eventually(lambda: _answered(s.store, "s1", "r1"), within=20)
        # counted once the wake was queued: the Brain may answer before the count
        await assert_eventually(lambda: _woken(s.scheduler, "result", 1), within=5)
        assert s.scheduler.refusals() == {("results", "not_backed"): 1}


async def _refused(scheduler: Scheduler) -> bool:
    return scheduler.refused["results", "not_backed"] == 1


async def test_a_result_arriving_while_its_session_is_driven_is_applied_promptly(
    tmp_path: Path, location: StoreLocation
) -> None:
    """The result lands while another task of the same session keeps a drive (and the
    lease) busy: once that drive ends, the result is applied within a second."""
    release = asyncio.Event()

    async def hold(ctx: PhaseContext) -> PhaseOutcome:
        await release.wait()
        return Done(result="held")

    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    registry.add(kind("hold", {"start": hold}))
    async with system(tmp_path, location, registry) as s:
        await s.client.submit("s1", "r1", {"task": {"kind": "caller", "input": 0.5}})
        await s.client.submit("s1", "r2", {"task": {"kind": "hold"}})
        await s.wakes.wake("s1", reason="submission")
        await assert_eventually(lambda: _has_runs(s.ledger), within=20)  # result is in
        await asyncio.sleep(0.5)  # its event arrives while the hold keeps the drive busy
        release.set()
        released_at = time.monotonic()
        await assert_eventually(lambda: _answered(s.store, "s1", "r1"), within=10)
        assert time.monotonic() - released_at < 2.0
        await assert_eventually(lambda: _answered(s.store, "s1", "r2"), within=10)


async def test_shutdown_ends_the_scheduler_whichever_redis_call_its_loops_are_in(
    tmp_path: Path,
) -> None:
    """Shutdown cancels the scheduler's loops; one cancelled inside a Redis command (its
    send is wrapped in asyncio.wait_for, which on Python 3.11 can drop the cancellation)
    used to loop on, and the run never ended — it held a whole CI run until its limit."""
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    location, _ = new_location("sqlite", tmp_path)
    store = await location.open()
    client = redis_client.connect(url)
    wakes = RQWakes(url, prefix=prefix)
    try:
        for attempt in range(40):
            scheduler = Scheduler(
                store=store,
                bus=None,
                wakes=wakes,
                leases=RedisLeases(client, prefix=prefix),
                settings=SchedulerSettings(timer_every=timedelta(0), reconcile_every=None),
            )
            running = asyncio.create_task(scheduler.run())
            await asyncio.sleep(0.001 * (attempt % 7))
            await scheduler.shutdown()
            done, _ = await asyncio.wait({running}, timeout=5)
            assert done, f"attempt {attempt}: the scheduler did not stop"
    finally:
        wakes.close()
        await client.aclose()
        await location.close_all()


def _known(function: Any, **wanted: Any) -> dict[str, Any]:
    """The keyword arguments ``function`` takes, of ``wanted``."""
    return {k: v for k, v in wanted.items() if k in inspect.signature(function).parameters}


def on_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


async def _answer(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result=ctx.input)


async def test_a_session_whose_holder_died_goes_on_as_soon_as_its_lease_lapses(
    tmp_path: Path, location: StoreLocation
) -> None:
    """A Brain died holding a session's lease: nothing released it and no wake is queued.
    The scheduler wakes the session right after the lease lapses (within its timer
    period, 100 ms), not at the next reconciler pass — which is off here."""
    registry = Registry()
    registry.add(kind("answer", {"start": _answer}))
    async with system(tmp_path, location, registry) as s:
        await s.client.submit("orphan", "r1", {"task": {"kind": "answer", "input": 1}})
        ttl = timedelta(seconds=1)
        held = await s.brain.leases.acquire("orphan", "a-brain-that-died", ttl=ttl)
        assert held is not None
        started = time.monotonic()
        await assert_eventually(lambda: _answered(s.store, "orphan", "r1"), within=10)
        assert time.monotonic() - started < ttl.total_seconds() + 1.0
        # counted once the wake was queued: the Brain may answer before the count. A
        # second wake of the session would have had the Brain retry until the lapse and
        # take it first; none comes once the scheduler's first audit is done (system()).
        await assert_eventually(
            lambda: _woken(s.scheduler, "lapsed", 1),
            within=5,
            said=lambda: (
                f"wakes by cause {dict(s.scheduler.woken)}, audits "
                f"{s.scheduler.passes}, drive reports {len(s.brain.reports)}"
            ),
        )
        exported = SchedulerMetrics(s.scheduler).registry
        lapsed = {"cause": "lapsed"}
        counted = exported.get_sample_value("brainhands_scheduler_wakes_total", lapsed)
        assert counted is not None and counted >= 1  # (a loaded machine may lapse more)


async def _audited(scheduler: Scheduler) -> bool:
    return scheduler.passes >= 1


async def _woken(scheduler: Scheduler, cause: str, least: int) -> bool:
    return scheduler.woken[cause] >= least


async def _has_runs(ledger: Path) -> bool:
    return bool(await asyncio.to_thread(runs, ledger))


async def _answered(store: SessionStore, session_id: str, request_id: str) -> bool:
    handle = await store.session(session_id)
    submission = await handle.submission(request_id)
    return submission is not None and submission.status is SubmissionStatus.ANSWERED


async def test_losing_redis_mid_run_delays_work_and_loses_none(
    tmp_path: Path, location: StoreLocation
) -> None:
    """Redis loses its data while sessions wait on the Hands: wakes, leases and fence
    counters are gone; the reconciler finds the work again from the store, fences are
    re-seeded above the store's, and every session completes with each operation run
    once. The system runs on a logical database of its own, emptied with FLUSHDB — what
    it loses is what FLUSHALL would take, without wiping the keys of whatever else
    shares the Redis server (other tests, a developer's `bh up`)."""
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    sessions = [f"s{n}" for n in range(4)]
    async with system(
        tmp_path, location, registry, reconcile_every=timedelta(seconds=1), redis_db=LOSS_DB
    ) as s:
        for session_id in sessions:
            await s.client.submit(session_id, "r1", {"task": {"kind": "caller", "input": 1.0}})
            await s.wakes.wake(session_id, reason="submission")
        await assert_eventually(lambda: _has_runs(s.ledger), within=20)
        flush = redis_client.connect(on_db(require("BH_REDIS_URL", "Redis"), LOSS_DB))
        await flush.flushdb()
        await flush.aclose()
        for session_id in sessions:
            await assert_eventually(partial(_answered, s.store, session_id, "r1"), within=30)
    ran = runs(s.ledger)
    assert len(ran) == len(sessions) and len(set(ran)) == len(sessions)


@pytest.fixture
def sqlite_only(tmp_path: Path) -> StoreLocation:
    return new_location("sqlite", tmp_path)[0]


@pytest.mark.sqlite  # the store plays no part: NATS loses its data
async def test_a_results_stream_lost_with_the_nats_data_is_consumed_again(
    tmp_path: Path, sqlite_only: StoreLocation
) -> None:
    """NATS loses the results stream and the scheduler's consumer with it (a restart
    without its data): the scheduler creates both again, and the next result event still
    wakes the Brain — with the reconciler off. (Before, the scheduler kept fetching from
    the vanished consumer and never handled a result again.)"""
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    try:
        async with system(tmp_path, sqlite_only, registry) as s:
            await assert_eventually(lambda: _consumer_exists(s.bus), within=15)  # consuming
            await s.bus.js.delete_stream(s.bus.stream(RESULTS_STREAM))
            await assert_eventually(lambda: _consumer_exists(s.bus), within=15)
            await s.client.submit("s1", "r1", {"task": {"kind": "caller", "input": 0.1}})
            await s.wakes.wake("s1", reason="submission")
            await assert_eventually(lambda: _answered(s.store, "s1", "r1"), within=20)
    finally:
        await sqlite_only.close_all()
    assert len(runs(s.ledger)) == 1


async def _consumer_exists(bus: Bus) -> bool:
    try:
        await bus.js.consumer_info(bus.stream(RESULTS_STREAM), CONSUMER)
    except nats.js.errors.NotFoundError:
        return False
    return True


@pytest.mark.sqlite
async def test_losing_both_streams_mid_run_delays_work_and_loses_none(
    tmp_path: Path, sqlite_only: StoreLocation
) -> None:
    """Issue 13, defect 7: the dispatch is lost after the relay recorded it sent (the
    dispatch stream purged before any Hands took it), later the result event too (the
    results stream purged). The store is the source of truth for what must run: the
    scheduler re-issues the dispatch from the committed intent and, the event lost,
    wakes the session from the stored result."""
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    async with system(
        tmp_path,
        sqlite_only,
        registry,
        hands=False,
        watch_after=timedelta(seconds=0.5),
        attend_every=timedelta(seconds=0.2),
        reissue_after=timedelta(seconds=1),
    ) as s:
        await s.client.submit("s1", "r1", {"task": {"kind": "caller", "input": 0.1}})
        await s.wakes.wake("s1", reason="submission")
        await assert_eventually(lambda: _relayed(s.store, "s1"), within=20)
        await s.bus.js.purge_stream(s.bus.stream(DISPATCH_STREAM))
        await s.bus.js.purge_stream(s.bus.stream(RESULTS_STREAM))
        async with running_hands(s.store, ProcessSandbox(tmp_path / "runs"), s.bus):
            await assert_eventually(lambda: _answered(s.store, "s1", "r1"), within=30)
    assert len(runs(s.ledger)) == 1


async def _relayed(store: SessionStore, session_id: str) -> bool:
    state = (await store.session(session_id)).state
    waiting = any(t.wait and t.wait.operations for t in state.tasks.values())
    return waiting and not state.outbox


async def _sleep_a_day(ctx: PhaseContext) -> PhaseOutcome:
    return Sleep(until=utcnow() + timedelta(days=1), next_phase="done")


async def _done(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result="slept")


@pytest.mark.sqlite
async def test_only_sessions_waiting_on_the_hands_need_attention(
    tmp_path: Path, sqlite_only: StoreLocation
) -> None:
    """Issue 13, defect 11 (the reconciler's part): a pass of the attention set costs in
    proportion to the sessions that need it. A session sleeping for a day, or idle,
    is not in it, and an attention pass neither reads it nor writes to it; the audit of
    every active session runs every 10 min, not every 30 s."""
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    registry.add(kind("sleeper", {"start": _sleep_a_day, "done": _done}))
    async with system(tmp_path, sqlite_only, registry, hands=False, watch_after=timedelta(0)) as s:
        await s.client.submit("asleep", "r1", {"task": {"kind": "sleeper"}})
        await s.client.submit("waiting", "r1", {"task": {"kind": "caller", "input": 0.1}})
        for session_id in ("asleep", "waiting"):
            await s.wakes.wake(session_id, reason="submission")
        await assert_eventually(lambda: _relayed(s.store, "waiting"), within=20)
        await assert_eventually(lambda: _sleeping(s.store, "asleep"), within=20)
        await assert_eventually(lambda: _attention(s.wakes, "waiting"), within=10)
        before = (await s.store.session("asleep")).seq
        scheduler = Scheduler(store=s.store, bus=None, wakes=s.wakes, leases=s.brain.leases)
        assert "asleep" not in await s.wakes.attention.take()
        assert (await s.store.session("asleep")).seq == before
    assert SchedulerSettings().reconcile_every == timedelta(minutes=10)
    assert scheduler.passes == 0


async def _sleeping(store: SessionStore, session_id: str) -> bool:
    state = (await store.session(session_id)).state
    return any(t.status is TaskStatus.SLEEPING for t in state.tasks.values())


async def _attention(wakes: RQWakes, session_id: str) -> bool:
    due = await wakes.attention.take()
    return session_id in due


async def test_the_results_backlog_is_reported_before_and_after_a_scheduler_works_it_off(
    tmp_path: Path,
) -> None:
    """Result events no scheduler has taken yet are the results stream's backlog: in the
    scheduler's metrics and its beat in the store (the console's fleet page), with the
    age of the oldest; once a scheduler consumed them, the backlog is empty although the
    stream (limits retention) still holds the events."""
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path}/store.db")  # the beats' (any backend)
    client = redis_client.connect(url)
    wakes = RQWakes(url, prefix=prefix)
    async with scratch_bus() as bus:
        await bus.ensure_streams()
        for n in range(2):
            event = ResultEvent(operation_id=f"op-{n}", session_id="s1", succeeded=True)
            await bus.publish(result_subject("s1"), event, msg_id=f"backlog-{n}")
        await asyncio.sleep(1.2)
        settings = SchedulerSettings(reconcile_every=None, beat_every=timedelta(seconds=0.2))
        leases = RedisLeases(client, prefix=prefix)
        scheduler = Scheduler(store=store, bus=bus, wakes=wakes, leases=leases, settings=settings)
        metrics = SchedulerMetrics(scheduler)
        await metrics.refresh()
        pending = 'brainhands_results_backlog{state="pending"}'
        exported = generate_latest(metrics.registry).decode()
        assert f"{pending} 2.0" in exported, exported
        age = metrics.registry.get_sample_value("brainhands_results_oldest_age_seconds")
        assert age is not None and 1.0 <= age < 60
        beat = await scheduler.beat()
        assert beat.results is not None and beat.results.pending == 2
        assert beat.dispatch is not None and beat.dispatch.pending == 0
        assert [b.scheduler for b in await store.fleet.schedulers.listed()] == [scheduler.name]

        running = asyncio.create_task(scheduler.run())
        try:
            await assert_eventually(lambda: _refused_all(scheduler, 2), within=20)
            await metrics.refresh()
            assert (
                metrics.registry.get_sample_value(
                    "brainhands_results_backlog", {"state": "pending"}
                )
                == 0
            )
            assert metrics.registry.get_sample_value("brainhands_results_oldest_age_seconds") == 0
        finally:
            await scheduler.shutdown()
            await running
        assert await store.fleet.schedulers.listed() == [], "a stopped scheduler leaves"
    wakes.close()
    await client.aclose()
    await store.close()


async def _refused_all(scheduler: Scheduler, count: int) -> bool:
    return scheduler.refused["results", "not_backed"] == count


async def _ask(ctx: PhaseContext) -> PhaseOutcome:
    return Wait(question=Question(id="go", prompt="Go on?"), next_phase="told")


async def _told(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result=ctx.answer("go").value)


async def test_the_periodic_audit_leaves_quiet_sessions_be_until_news_lands(
    tmp_path: Path, location: StoreLocation
) -> None:
    """A Brain whose drive leaves a session waiting for a person marks it quiet; the
    periodic audit wakes only the sessions that are not (a submission nobody woke a Brain
    for), while the audit after Redis lost data reads every one. An answer, committed
    with no wake (the API died before waking), takes the mark back: the next periodic
    audit wakes that session and its task goes on. A mark left stale by such a crash is
    found by the audit's slice of quiet sessions that it reads anyway."""
    registry = Registry()
    registry.add(kind("ask", {"start": _ask, "told": _told}))
    async with system(tmp_path, location, registry, hands=False, quiet_slices=10_000) as s:
        await s.client.submit("waits", "r1", {"task": {"kind": "ask"}})
        await s.wakes.wake("waits", reason="submission")
        await assert_eventually(lambda: _quiet(s.store, "waits"), within=20)
        await s.client.submit("forgotten", "r1", {"task": {"kind": "ask"}})  # never woken

        woken = await s.scheduler.reconcile(full=False)
        assert woken == ["forgotten"], "the quiet one is left be"
        await assert_eventually(lambda: _quiet(s.store, "forgotten"), within=20)
        assert sorted(await s.scheduler.reconcile(full=True)) == ["forgotten", "waits"]

        await s.client.answer("waits", "a1", "go", "yes", by="ops")  # committed; wake lost
        assert await s.scheduler.reconcile(full=False) == ["waits"]
        await assert_eventually(lambda: _answered(s.store, "waits", "r1"), within=20)

        # the answer's writer dies between its commit and taking the Brain's mark back
        taking_back = s.store.index.unquiet

        async def died(session_id: str) -> None:
            return None

        s.store.index.unquiet = died  # type: ignore[method-assign]
        await s.client.answer("forgotten", "a1", "go", "yes", by="ops")
        s.store.index.unquiet = taking_back  # type: ignore[method-assign]
        assert await s.scheduler.reconcile(full=False) == [], "a stale mark hides it..."
        s.scheduler.settings = s.scheduler.settings.model_copy(update={"quiet_slices": 1})
        assert await s.scheduler.reconcile(full=False) == ["forgotten"], "...until its slice"
        await assert_eventually(lambda: _answered(s.store, "forgotten", "r1"), within=20)


async def _unlisted(store: SessionStore, session_id: str) -> bool:
    return session_id not in {s async for s in store.active_sessions()}


async def _quiet(store: SessionStore, session_id: str) -> bool:
    marked = {s async for s in store.active_sessions(verify=lambda _: False)}
    active = {s async for s in store.active_sessions()}
    return session_id in active and session_id not in marked


async def test_the_audit_sweeps_a_finished_session_the_index_still_lists(
    tmp_path: Path, location: StoreLocation
) -> None:
    """A drive dropped right after the commit that finished its session (its lease lost
    under load) left the session's active marker: the audit sweeps it instead of waking
    the session at every pass."""
    registry = Registry()
    registry.add(kind("answer", {"start": _answer}))
    async with system(tmp_path, location, registry, hands=False) as s:
        await s.client.submit("done", "r1", {"task": {"kind": "answer", "input": 1}})
        await s.wakes.wake("done", reason="submission")
        await assert_eventually(lambda: _answered(s.store, "done", "r1"), within=20)
        # the drive takes its mark away after the answer: wait for that, or it would
        # take away the test's mark too (a loaded machine's drive ends late)
        await assert_eventually(lambda: _unlisted(s.store, "done"), within=20)
        await s.store.index.mark("done")  # what the dropped drive left behind
        assert "done" in {session_id async for session_id in s.store.active_sessions()}
        assert await s.scheduler.reconcile() == [], "nothing to wake"
        assert "done" not in {session_id async for session_id in s.store.active_sessions()}


#: ids no store can hold (a 10 kB one overflows S3's and DynamoDB's keys)
MALFORMED_IDS = ("../../etc/passwd", "x" * 10_000)


async def test_malformed_ids_at_the_schedulers_doors_are_refused_once(
    tmp_path: Path, location: StoreLocation, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31, finding 10. A result event with a malformed id was nak'ed every second
    forever on S3 and DynamoDB (the store's key too long: unavailable); a member of the
    attention set that is not a session id was looked at again every 30 s forever; one
    in the due set was queued as a wake (and a bad one stopped the promotion of the
    others due with it). Each is refused once: terminated or dropped, counted by door
    and reason, one warning without a traceback; a good member due beside them is
    still woken."""
    caplog.set_level(logging.INFO)
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    client = redis_client.connect(url)
    wakes = RQWakes(url, prefix=prefix)
    settings = SchedulerSettings(reconcile_every=None, attend_every=None, beat_every=None)
    async with scratch_bus() as bus:
        await bus.ensure_streams()
        wire = {"operation_id": "op-1", "session_id": "s1", "succeeded": True}
        for n, bad in enumerate(MALFORMED_IDS):
            for field in ("operation_id", "session_id"):
                raw = json.dumps(wire | {field: bad}).encode()
                await bus.publish(result_subject("s1"), raw, msg_id=f"raw-{field}-{n}")
        await bus.publish(result_subject("s1"), b"not json", msg_id="raw-text")
        leases = RedisLeases(client, prefix=prefix)
        scheduler = Scheduler(store=store, bus=bus, wakes=wakes, leases=leases, settings=settings)
        running = asyncio.create_task(scheduler.run())
        try:
            await assert_eventually(lambda: _results_settled(scheduler, bus), within=20)
        finally:
            await scheduler.shutdown()
            await running
        for bad in MALFORMED_IDS:
            await wakes.attention.watch(bad, after=timedelta(0))
            await client.zadd(due_key(prefix), {bad: 0, "s-due": 0})
        assert await scheduler.attend() == {}
        assert await client.zcard(f"{prefix}:attention") == 0, "dropped, not watched again"
        assert await wakes.promote_due() == ["s-due"]
        queued = redis_client.connect_sync(url)
        assert wake_queue(prefix, "default", queued).count == 1, "s-due's wake only"
        queued.close()
    refused = scheduler.refusals()
    assert refused == {
        ("results", "invalid_id"): 2 * len(MALFORMED_IDS),
        ("results", "malformed"): 1,
        ("attention", "invalid_id"): len(MALFORMED_IDS),
        ("due", "invalid_id"): len(MALFORMED_IDS),
    }, refused
    exported = SchedulerMetrics(scheduler).registry
    sample = {"door": "attention", "reason": "invalid_id"}
    assert exported.get_sample_value("brainhands_scheduler_refused_total", sample) == 2
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == sum(refused.values()), [r.getMessage()[:200] for r in warned]
    assert all(r.exc_info is None and len(r.getMessage()) < 400 for r in warned)
    wakes.close()
    await client.aclose()


async def _results_settled(scheduler: Scheduler, bus: Bus) -> bool:
    """Every event refused, and none left to deliver again."""
    refused = sum(n for (door, _), n in scheduler.refusals().items() if door == "results")
    if refused != 2 * len(MALFORMED_IDS) + 1:
        return False
    info = await bus.js.consumer_info(bus.stream(RESULTS_STREAM), CONSUMER)
    return info.num_pending + info.num_ack_pending == 0


@pytest.mark.sqlite  # the store plays no part: the bus's duplicate window does
async def test_a_lost_dispatch_is_reissued_at_the_first_attention_and_at_each_after(
    tmp_path: Path, sqlite_only: StoreLocation
) -> None:
    """Issue 31, finding 12: the relayed dispatch is lost (purged before any Hands took
    it) while the stream's duplicate window still remembers its ``Nats-Msg-Id``. The
    first attention re-issues it with an id the window has not seen, so the stream holds
    it again; each later re-issue, by this scheduler or another one (a count shared in
    Redis, not per process), adds one more copy instead of repeating an id."""
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    # the scheduler's own attention loop audits on start, then leaves the passes to the test
    hour = timedelta(hours=1)
    async with system(tmp_path, sqlite_only, registry, hands=False, attend_every=hour) as s:
        await s.client.submit("s1", "r1", {"task": {"kind": "caller", "input": 0.1}})
        await s.wakes.wake("s1", reason="submission")
        await assert_eventually(lambda: _relayed(s.store, "s1"), within=20)
        await s.bus.js.purge_stream(s.bus.stream(DISPATCH_STREAM))
        other = Scheduler(store=s.store, bus=s.bus, wakes=s.wakes, leases=s.brain.leases)
        for turn, scheduler in enumerate([s.scheduler, other, s.scheduler], start=1):
            await s.wakes.attention.watch("s1", after=timedelta(0))
            assert (await scheduler.attend()).get("reissued") == 1
            assert await _dispatches(s.bus) == turn, f"re-issue {turn} was dropped"
        assert s.scheduler.reissued == 2 and other.reissued == 1
        assert s.scheduler.duplicates == other.duplicates == 0


async def _dispatches(bus: Bus) -> int:
    """The messages the dispatch stream holds (nobody consumes them here)."""
    return (await bus.js.stream_info(bus.stream(DISPATCH_STREAM))).state.messages
