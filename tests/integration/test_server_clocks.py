"""Facts kept in Redis and NATS are compared on the server's clock, never on a host's
(invariant 17): each test plays a host whose wall clock is off (``tests.support.skew``)
while Redis and NATS keep theirs, and checks that nothing it decides or reports moves:
route advertisements, delayed wakes and the scheduler's timer, the wake backlog's age,
the wait of a wake, the dispatch backlog's age, the audit's slice of quiet sessions, and
the fleet page's Brain beats."""

from __future__ import annotations

import asyncio
import re
import uuid
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

import coordination.consumer
import coordination.wakes
from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome, Sleep
from brain.registry import Registry
from brain.service import BrainService
from bus import dispatch_subject
from bus.backlog import HANDS_CONSUMER, dispatch_backlog
from bus.jetstream import DISPATCH_STREAM
from contracts import utcnow
from coordination import redis_client
from coordination.consumer import WakeConsumer
from coordination.incarnations import RedisIncarnations
from coordination.leases import RedisLeases
from coordination.routes import Routes
from coordination.timer import LONGEST_WAIT, Timer
from coordination.wakes import RQWakes, due_key
from runtime.cancellation import cancel_and_wait
from scheduler.service import Scheduler, SchedulerSettings
from scheduler.turns import Turns
from session_api.app import create_app
from session_store import open_store
from tests.support.console import log_in
from tests.support.eventually import assert_eventually
from tests.support.kernel import Kernel, kernel, kind
from tests.support.services import require
from tests.support.skew import wall_clock_off_by
from tests.support.toolpath import scratch_bus
from webapi.auth import Access, Grant

pytestmark = pytest.mark.redis

READER = "reader-token-0123456789abcdef"


@dataclass
class Redises:
    url: str
    prefix: str
    client: Redis
    wakes: RQWakes


@pytest.fixture
async def redis() -> AsyncIterator[Redises]:
    url = require("BH_REDIS_URL", "Redis")
    client = redis_client.connect(url)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    wakes = RQWakes(url, prefix=prefix)
    yield Redises(url, prefix, client, wakes)
    wakes.close()
    await client.aclose()


async def _served(r: Redises, route: str) -> bool:
    return {b.route: b.served for b in await r.wakes.backlog()}.get(route, False)


async def _sleep_a_minute(ctx: PhaseContext) -> PhaseOutcome:
    return Sleep(until=ctx.now() + timedelta(minutes=1), next_phase="woken")


async def _woken(ctx: PhaseContext) -> PhaseOutcome:
    return Done()


# -- route advertisements ----------------------------------------------------------------


async def test_a_brain_whose_clock_is_behind_is_live_to_routers_whose_clock_is_ahead(
    redis: Redises,
) -> None:
    """A Brain 20 s behind advertises; routers and the backlog 30 s ahead of Redis still
    see its route live (before: never live, sessions reported blocked, served=0)."""
    routes = Routes(redis.client, prefix=redis.prefix)
    with wall_clock_off_by(-20):
        route = await routes.advertise(["job@1"])
    assert route in await routes.live()
    with wall_clock_off_by(30):
        assert route in await routes.live()
        assert await _served(redis, route)


async def test_a_dead_brains_route_lapses_on_redis_time_whatever_its_clock(
    redis: Redises,
) -> None:
    """A Brain 30 s ahead advertises once and dies: its route lapses after the lifetime
    (before: it stayed live for the lifetime plus 30 s)."""
    routes = Routes(redis.client, prefix=redis.prefix, lifetime=0.3)
    with wall_clock_off_by(30):
        route = await routes.advertise(["job@1"])
    assert route in await routes.live()
    await assert_eventually(lambda: _gone(routes, route), within=5)
    assert not await _served(redis, route)


async def _gone(routes: Routes, route: str) -> bool:
    return route not in await routes.live()


# -- delayed wakes and the scheduler's timer ---------------------------------------------


async def test_a_scheduler_ahead_of_the_brain_promotes_a_delayed_wake_only_when_due(
    redis: Redises,
) -> None:
    """A Brain asks for a wake in 10 s; a scheduler 30 s ahead neither promotes it nor
    wakes up for it before then (before: it promoted at once, and the Brain, finding
    nothing due, asked again — a hot loop for 30 s)."""
    leases = RedisLeases(redis.client, prefix=redis.prefix)
    timer = Timer(
        redis.client,
        prefix=redis.prefix,
        due_key=due_key(redis.prefix),
        held_key=leases.watch_key,
    )
    await redis.wakes.wake("s1", reason="timer", after=timedelta(seconds=10))
    with wall_clock_off_by(30, coordination.wakes):
        assert await redis.wakes.promote_due() == []
        assert await timer.next_in() == LONGEST_WAIT
    await redis.wakes.wake("s2", reason="timer", after=timedelta(seconds=0.2))
    with wall_clock_off_by(-30, coordination.wakes):
        await assert_eventually(lambda: _promoted(redis.wakes, "s2"), within=5)


async def _promoted(wakes: RQWakes, session_id: str) -> bool:
    return await wakes.promote_due() == [session_id]


async def test_a_brain_ahead_asks_for_its_sleepers_wake_after_the_sleep_not_its_skew(
    tmp_path: Path, redis: Redises
) -> None:
    """A Brain whose clock is 30 s ahead drives a task that sleeps a minute: the delayed
    wake is due a minute from now on Redis's clock (before: 90 s — the due time, on the
    Brain's clock, read as a moment on the scheduler's)."""
    registry = Registry()
    registry.add(kind("nap", {"start": _sleep_a_minute, "woken": _woken}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("nap")
        ahead = k.runner("brain-ahead", clock=lambda: utcnow() + timedelta(seconds=30))
        service = BrainService(
            runner=ahead,
            leases=RedisLeases(redis.client, prefix=redis.prefix),
            wakes=redis.wakes,
            redis_url=redis.url,
            concurrency=1,
        )
        try:
            await service.drive("s1")
        finally:
            await service.shutdown()
    score = await redis.client.zscore(due_key(redis.prefix), "s1")
    seconds, micros = await redis.client.time()
    assert score is not None
    assert 50 < score - (seconds + micros / 1e6) <= 60


# -- the wake backlog's age, and a wake's wait -------------------------------------------


async def test_the_wake_backlog_age_is_redis_time_since_the_enqueue(
    redis: Redises,
) -> None:
    """Wakes queued by a host an hour behind, read by a host an hour ahead: the oldest is
    seconds old (before: two hours)."""
    with wall_clock_off_by(-3600, coordination.wakes):
        await redis.wakes.wake("s1", reason="test")
    with wall_clock_off_by(3600):
        (backlog,) = await redis.wakes.backlog()
    assert backlog.waiting == 1
    assert 0 <= backlog.oldest_age_s < 60


async def test_a_wakes_wait_is_measured_on_redis_time(redis: Redises) -> None:
    """A wake queued by a host an hour behind, started by a Brain an hour ahead after
    seconds: its metric says seconds (before: two hours)."""
    waits: list[float] = []

    class Heard:
        def wake_started(self, waited: float) -> None:
            waits.append(waited)

        def wake_refused(self, reason: str) -> None:
            raise AssertionError(reason)

    async def drive(session_id: str) -> str:
        return "driven"

    failures = redis_client.connect_sync(redis.url)
    taking = redis_client.connect(redis.url)
    consumer = WakeConsumer(
        taking,
        failures,
        prefix=redis.prefix,
        route=redis.wakes.route,
        slots=1,
        drive=drive,
        observer=Heard(),
    )
    with wall_clock_off_by(-3600, coordination.wakes):
        await redis.wakes.wake("s1", reason="test")
    running = asyncio.create_task(consumer.run())
    try:
        with wall_clock_off_by(3600, coordination.consumer):
            await assert_eventually(lambda: _heard(waits), within=10)
    finally:
        consumer.stop()
        await cancel_and_wait(running)
        await taking.aclose()
        failures.close()
    assert 0 <= waits[0] < 60


async def _heard(waits: list[float]) -> bool:
    return bool(waits)


# -- the dispatch backlog's age ----------------------------------------------------------


@pytest.mark.nats
async def test_the_dispatch_backlog_age_is_the_nats_servers_time_since_publication() -> None:
    """Read by a host an hour ahead, a dispatch published now is seconds old — before the
    Hands' consumer exists and after (before: an hour)."""
    async with scratch_bus() as bus:
        await bus.publish(dispatch_subject("t"), b"{}", msg_id=uuid.uuid4().hex)
        with wall_clock_off_by(3600):
            unbound = await dispatch_backlog(bus)
        await bus.js.add_consumer(bus.stream(DISPATCH_STREAM), durable_name=HANDS_CONSUMER)
        with wall_clock_off_by(3600):
            bound = await dispatch_backlog(bus)
    assert unbound.pending == 1 and 0 <= unbound.oldest_age < 60
    assert bound.pending == 1 and 0 <= bound.oldest_age < 60


# -- the audit's slice of quiet sessions -------------------------------------------------


async def test_schedulers_whose_clocks_differ_read_each_slice_of_quiet_sessions_in_turn(
    tmp_path: Path, redis: Redises
) -> None:
    """Three periodic audits, by two schedulers a period apart on their clocks, read
    every quiet session once between them (before: a slice read twice, one never)."""
    slices = 3
    ids: dict[int, str] = {}
    for n in range(100):
        ids.setdefault(zlib.crc32(f"q{n}".encode()) % slices, f"q{n}")
    registry = Registry()
    registry.add(kind("nap", {"start": _sleep_a_minute, "woken": _woken}))
    settings = SchedulerSettings(quiet_slices=slices, reconcile_every=timedelta(minutes=10))
    period = settings.reconcile_every.total_seconds()  # type: ignore[union-attr]
    async with kernel(tmp_path, registry) as k:
        for session_id in ids.values():
            await k.submit_task("nap", session_id=session_id)
            handle = await k.store.session(session_id)
            assert await k.store.index.quiet(session_id, seq=handle.state.seq)
        await _stale_marks(k, list(ids.values()))
        leases = RedisLeases(redis.client, prefix=redis.prefix)
        turns = Turns(redis.client, prefix=redis.prefix)
        one, other = (
            Scheduler(
                store=k.store,
                bus=None,
                wakes=redis.wakes,
                leases=leases,
                turns=turns,
                settings=settings,
            )
            for _ in range(2)
        )
        woken: list[str] = []
        for scheduler, skew in ((one, 0.0), (other, period), (one, 0.0)):
            with wall_clock_off_by(skew):
                woken += await scheduler.reconcile(full=False)
    assert sorted(woken) == sorted(ids.values())


async def _stale_marks(k: Kernel, sessions: list[str]) -> None:
    """A commit lands on each quiet session and its writer dies before taking the mark
    back: stale marks, which only the audit's slices find."""
    taking_back = k.store.index.unquiet

    async def died(session_id: str) -> None:
        return None

    k.store.index.unquiet = died  # type: ignore[method-assign]
    try:
        for session_id in sessions:
            await k.submit_task("nap", session_id=session_id, request_id="r2")
    finally:
        k.store.index.unquiet = taking_back  # type: ignore[method-assign]


# -- the fleet page's Brain beats --------------------------------------------------------


async def test_the_fleet_page_ages_a_brains_beat_on_redis_time(
    tmp_path: Path, redis: Redises
) -> None:
    """A Brain whose clock is two minutes behind has just beaten: the fleet page shows a
    fresh beat (before: "120 s ago — not beating: gone")."""
    beats = RedisIncarnations(redis.client, prefix=redis.prefix)
    stamp = datetime.now(UTC).timestamp() - 120  # what a Brain behind stamped its beat with
    await beats.beat("brain-behind", "elsewhere pid 1", stats={"route": "r1", "beat_at": stamp})
    grants = [Grant(name="reader", token=SecretStr(READER), access=Access.READ)]
    async with _fleet_page(tmp_path, redis, grants) as page:
        row = page.split('data-runner="brain-behind"', 1)[1].split("</tr>", 1)[0]
    age = re.search(r"(\d+) s ago", row)
    assert age is not None and int(age.group(1)) < 5 and "not beating" not in row, row


@asynccontextmanager
async def _fleet_page(tmp_path: Path, redis: Redises, grants: list[Grant]) -> AsyncIterator[str]:
    store = await open_store(f"sqlite:///{tmp_path / 'fleet.db'}")
    app = create_app(
        store=store,
        wakes=redis.wakes,
        tokens=grants,
        backlog=redis.wakes.backlog,
        brains=redis.wakes.brains,
    )
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api"
        ) as http:
            await log_in(http, READER)
            answer = await http.get("/console/fleet")
            assert answer.status_code == 200, answer.text
            yield answer.text
    finally:
        await store.close()
