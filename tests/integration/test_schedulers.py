"""Several schedulers at once over one namespace, on real Redis, RQ and NATS: result
events, due timers and reconciler passes each take effect once.

Three schedulers, each built as ``python -m scheduler`` builds one (its own store
client, Redis and NATS connections), two Brain workers and a Hands run together over
sessions of three sorts: tool calls whose result events wake their session, sleeping
tasks woken by a due timer, and tool calls whose dispatch a Brain committed but never
published (it "died" first) — only a reconciler pass can find those.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, Effects, PhaseOutcome, Sleep
from brain.registry import Registry
from brain.relay import OutboxRelay
from brain.runner import DriveReport, SessionRunner
from brain.service import BrainService
from brain.services import Services
from brain.tools import LocalDispatcher
from bus import RESULTS_STREAM, Bus
from contracts import OutboxMessage, StoreUnavailable, SubmissionStatus, utcnow
from contracts.tool import ToolDefinition
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.routes import Routes, SessionRouter
from coordination.wakes import RQWakes, wake_queue
from hands.sandbox.process import ProcessSandbox
from runtime.crashpoints import CrashPoints
from scheduler.assembly import Connections, build
from scheduler.service import CONSUMER, Scheduler, SchedulerSettings
from session_store import SessionStore
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import kind
from tests.support.services import require
from tests.support.stores import StoreLocation, new_location
from tests.support.toolpath import (
    brain_services,
    bus_settings,
    ledger_tool,
    running_hands,
    runs,
    scratch_bus,
)

pytestmark = [pytest.mark.redis, pytest.mark.nats]

SCHEDULERS = 3
RECONCILE_EVERY = timedelta(seconds=1)
NAP = timedelta(seconds=1.5)


class DriveWatch:
    """How many drives of each session run at once, across every Brain of the test."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    def enter(self, session_id: str) -> None:
        self.now[session_id] += 1
        self.most[session_id] = max(self.most[session_id], self.now[session_id])

    def leave(self, session_id: str) -> None:
        self.now[session_id] -= 1


class WatchedRunner(SessionRunner):
    def __init__(
        self, store: SessionStore, registry: Registry, services: Services, watch: DriveWatch
    ) -> None:
        super().__init__(store, registry, services)
        self.watch = watch

    async def drive(self, session_id: str, **options: Any) -> DriveReport:
        self.watch.enter(session_id)
        try:
            return await super().drive(session_id, **options)
        finally:
            self.watch.leave(session_id)


class BusAway(OutboxRelay):
    """The relay of a Brain that dies between committing a dispatch and publishing it."""

    def __init__(self) -> None:
        pass  # it never publishes: no bus

    async def publish(self, messages: Sequence[OutboxMessage]) -> list[str]:
        raise StoreUnavailable("the bus is away (test)")


class Naps:
    """When each sleeper was due, and when its phase after the sleep ran."""

    def __init__(self) -> None:
        self.due: dict[str, datetime] = {}
        self.woke: dict[str, list[datetime]] = {}

    def registry(self) -> Registry:
        async def call(ctx: PhaseContext) -> PhaseOutcome:
            performed = await ctx.operation("act", {"sleep": 0.2}, "act")
            applied = Effects(applied_operations=(performed.operation_id,))
            return Done(result=performed.output, effects=applied)

        async def nap(ctx: PhaseContext) -> PhaseOutcome:
            due = self.due.setdefault(ctx.session_id, ctx.now() + NAP)
            return Sleep(until=due, next_phase="after")

        async def after(ctx: PhaseContext) -> PhaseOutcome:
            self.woke.setdefault(ctx.session_id, []).append(ctx.now())
            return Done(result="rested")

        registry = Registry()
        registry.add(kind("caller", {"start": call}))
        registry.add(kind("nap", {"start": nap, "after": after}))
        return registry


@asynccontextmanager
async def brain(
    location: StoreLocation,
    bus: Bus,
    name: str,
    *,
    registry: Registry,
    act: ToolDefinition,
    watch: DriveWatch,
) -> AsyncIterator[BrainService]:
    """A Brain worker with its own store client and Redis connections, routed as in
    production (it advertises what it runs)."""
    url = require("BH_REDIS_URL", "Redis")
    prefix = bus.settings.namespace
    store = await location.open()
    tools = LocalDispatcher()
    tools.add_sandboxed(act)
    client = redis_client.connect(url)
    routes = Routes(client, prefix=prefix)
    service = BrainService(
        runner=WatchedRunner(store, registry, brain_services(store, tools, bus, name), watch),
        leases=RedisLeases(client, prefix=prefix),
        wakes=RQWakes(url, prefix=prefix, router=SessionRouter(store, routes)),
        redis_url=url,
        concurrency=4,
        lease_ttl=timedelta(seconds=3),
        routes=routes,
    )
    running = asyncio.create_task(service.run())
    try:
        yield service
    finally:
        await service.shutdown()
        await running
        service.wakes.close()
        await client.aclose()


@asynccontextmanager
async def schedulers(
    location: StoreLocation, bus: Bus, count: int, settings: SchedulerSettings
) -> AsyncIterator[list[Scheduler]]:
    connections = Connections(
        store_url=location.url,
        redis_url=require("BH_REDIS_URL", "Redis"),
        nats_url=bus.settings.url,
        namespace=bus.settings.namespace,
    )
    async with AsyncExitStack() as resources:
        built = [
            await build(connections, resources, settings, name=f"scheduler-{n}")
            for n in range(count)
        ]
        running = [asyncio.create_task(s.run()) for s in built]
        try:
            yield built
        finally:
            for scheduler in built:
                await scheduler.shutdown()
            await asyncio.gather(*running)


async def commit_without_publishing(
    store: SessionStore, registry: Registry, act: ToolDefinition, session_id: str
) -> None:
    """Drive a session until its dispatch is committed; the publish fails, as when the
    Brain dies right after the commit: the outbox keeps the message, nothing wakes."""
    tools = LocalDispatcher()
    tools.add_sandboxed(act)
    services = Services(
        store=store,
        tools=tools,
        crash=CrashPoints(),
        clock=utcnow,
        runner_id=f"dead-{session_id}",
        relay=BusAway(),
    )
    report = await SessionRunner(store, registry, services).drive(session_id)
    assert report.awaiting and (await store.session(session_id)).state.outbox


async def test_several_schedulers_take_each_effect_once(
    tmp_path: Path, location: StoreLocation
) -> None:
    callers = [f"call{n}" for n in range(4)]
    sleepers = [f"nap{n}" for n in range(3)]
    unpublished = [f"lost{n}" for n in range(3)]
    naps, watch = Naps(), DriveWatch()
    registry = naps.registry()
    url = require("BH_REDIS_URL", "Redis")
    store = await location.open()
    client = SessionClient(store)
    ledger = tmp_path / "ledger"
    act = await store.tools.register(ledger_tool("act", ledger))
    for session_id in unpublished:
        await client.submit(session_id, "r1", {"task": {"kind": "caller"}})
        await commit_without_publishing(store, registry, act, session_id)
    async with scratch_bus(bus_settings()) as bus, AsyncExitStack() as stack:
        prefix = bus.settings.namespace
        control = redis_client.connect(url)
        stack.push_async_callback(control.aclose)
        wakes = RQWakes(
            url, prefix=prefix, router=SessionRouter(store, Routes(control, prefix=prefix))
        )
        stack.callback(wakes.close)
        await stack.enter_async_context(
            running_hands(store, ProcessSandbox(tmp_path / "runs"), bus)
        )
        for n in range(2):
            await stack.enter_async_context(
                brain(location, bus, f"brain-{n}", registry=registry, act=act, watch=watch)
            )
        started = time.monotonic()
        fleet = await stack.enter_async_context(
            schedulers(
                location, bus, SCHEDULERS, SchedulerSettings(reconcile_every=RECONCILE_EVERY)
            )
        )
        for session_id in callers:
            await client.submit(session_id, "r1", {"task": {"kind": "caller"}})
            await wakes.wake(session_id, reason="submission")
        for session_id in sleepers:
            await client.submit(session_id, "r1", {"task": {"kind": "nap"}})
            await wakes.wake(session_id, reason="submission")
        everyone = callers + sleepers + unpublished
        await assert_eventually(lambda: _all_answered(store, everyone), within=60)
        # a timer's wake is counted once all of its pass's wakes are queued: the Brain may
        # answer before that, and a scheduler stopped in between never counts them
        await assert_eventually(lambda: _promoted(fleet, len(sleepers)), within=10)
        passes, elapsed = sum(s.passes for s in fleet), time.monotonic() - started
        info = await bus.js.consumer_info(bus.stream(RESULTS_STREAM), CONSUMER)

    ran = runs(ledger)
    assert len(ran) == len(callers + unpublished) == len(set(ran))  # each operation once
    for session_id in callers + unpublished:
        applied = await _applications(store, session_id)
        assert list(applied.values()) == [1], (session_id, applied)  # each result once
    assert max(watch.most.values()) == 1, watch.most  # no session driven twice at once
    for session_id in sleepers:
        woke = naps.woke[session_id]
        assert len(woke) == 1 and woke[0] >= naps.due[session_id], (session_id, woke)
    # the sleepers' timers fired (once each, whichever scheduler found them: the next test)
    assert sum(s.woken["timer"] for s in fleet) >= len(sleepers)
    # each result event went to one scheduler: none redelivered, none handled twice
    assert info.num_redelivered == 0 and info.num_ack_pending == 0
    assert sum(s.woken["result"] for s in fleet) == len(ran)
    # one pass each on start, then one per period across the three (a turn lapses after
    # 0.9 period; without turns: one per period each, three times as many)
    most = SCHEDULERS + elapsed / (0.9 * RECONCILE_EVERY.total_seconds())
    assert SCHEDULERS <= passes <= most, (passes, elapsed)


async def _all_answered(store: SessionStore, sessions: list[str]) -> bool:
    for session_id in sessions:
        submission = await (await store.session(session_id)).submission("r1")
        if submission is None or submission.status is not SubmissionStatus.ANSWERED:
            return False
    return True


async def _applications(store: SessionStore, session_id: str) -> Counter[str]:
    """How many commits of the session's log applied each operation's result."""
    applied: Counter[str] = Counter()
    async for record in store.history(session_id):
        applied.update(record.commit.applied_operations)
    return applied


@pytest.mark.sqlite  # the store plays no part: timers live in Redis
async def test_each_due_timer_becomes_one_wake_whichever_scheduler_finds_it(
    tmp_path: Path,
) -> None:
    """Three schedulers look for due timers every 10 ms: each delayed wake is promoted by
    exactly one of them (the due set is read and trimmed in one script)."""
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    location = new_location("sqlite", tmp_path)[0]
    store = await location.open()
    sessions = [f"s{n}" for n in range(60)]
    setter = RQWakes(url, prefix=prefix)
    for session_id in sessions:
        await setter.wake(session_id, reason="timer", after=timedelta(seconds=0.5))
    settings = SchedulerSettings(timer_every=timedelta(milliseconds=10), reconcile_every=None)
    async with AsyncExitStack() as stack:
        fleet = []
        for _ in range(SCHEDULERS):
            client = redis_client.connect(url)
            stack.push_async_callback(client.aclose)
            wakes = RQWakes(url, prefix=prefix)
            stack.callback(wakes.close)
            fleet.append(
                Scheduler(
                    store=store,
                    bus=None,
                    wakes=wakes,
                    leases=RedisLeases(client, prefix=prefix),
                    settings=settings,
                )
            )
        running = [asyncio.create_task(s.run()) for s in fleet]

        async def stop() -> None:
            for scheduler in fleet:
                await scheduler.shutdown()
            await asyncio.gather(*running)

        stack.push_async_callback(stop)
        await assert_eventually(lambda: _promoted(fleet, len(sessions)), within=10)
    assert sum(s.woken["timer"] for s in fleet) == len(sessions)
    queued = wake_queue(prefix, "default", setter._sync)
    assert sorted(job.args[0] for job in queued.jobs) == sorted(sessions)
    queued.delete(delete_jobs=True)
    setter.close()
    await location.close_all()


async def _promoted(fleet: list[Scheduler], count: int) -> bool:
    return sum(s.woken["timer"] for s in fleet) >= count
