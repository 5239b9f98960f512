"""Wakes reach only Brains that can run the session (invariant 10): a session no running
Brain can serve is reported blocked with the reason, and runs once a compatible Brain
starts. On every store backend (the router reads the session and writes the report)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome
from brain.registry import Registry
from brain.service import BrainService
from brain.tools import LocalDispatcher
from contracts import CONTROL_DOCUMENT, SubmissionStatus
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.routes import ADVERTISEMENT_S, Routes, SessionRouter
from coordination.wakes import RQWakes
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import Kernel, kind
from tests.support.services import require
from tests.support.stores import StoreLocation
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.redis


async def _answer(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result=ctx.services.runner_id)


@asynccontextmanager
async def brain(
    store: SessionStore,
    url: str,
    prefix: str,
    name: str,
    kinds: list[str],
    *,
    lifetime: float = ADVERTISEMENT_S,
) -> AsyncIterator[BrainService]:
    registry = Registry()
    for name_ in kinds:
        registry.add(kind(name_, {"start": _answer}))
    client = redis_client.connect(url)
    routes = Routes(client, prefix=prefix, lifetime=lifetime)
    wakes = RQWakes(url, prefix=prefix, router=SessionRouter(store, routes))
    runner = Kernel(store, registry, LocalDispatcher(), SessionClient(store)).runner(name)
    service = BrainService(
        runner=runner,
        leases=RedisLeases(client, prefix=prefix),
        wakes=wakes,
        redis_url=url,
        concurrency=1,
        lease_ttl=timedelta(seconds=2),
        routes=routes,
    )
    running = asyncio.create_task(service.run())
    await assert_eventually(lambda: _advertised(routes, service.route), within=5)
    try:
        yield service
    finally:
        await service.shutdown()
        await running
        wakes.close()
        await client.aclose()


async def test_a_session_no_brain_can_run_is_blocked_then_runs_on_a_compatible_one(
    location: StoreLocation,
) -> None:
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await location.open()
    client = SessionClient(store)
    control = redis_client.connect(url)
    wakes = RQWakes(url, prefix=prefix, router=SessionRouter(store, Routes(control, prefix=prefix)))
    async with brain(store, url, prefix, "brain-echo", ["echo"]):
        await client.submit("s1", "r1", {"task": {"kind": "other"}})
        await client.submit("s2", "r1", {"task": {"kind": "echo"}})
        await wakes.wake("s1", reason="submission")
        await wakes.wake("s2", reason="submission")
        await assert_eventually(lambda: _answered(store, "s2"), within=20)
        reported = await _blocked(store, "s1")
        assert reported == {
            "submission r1": "no running Brain runs other@1 (running Brains run: echo@1)"
        }
        assert not await _answered(store, "s1")
        async with brain(store, url, prefix, "brain-other", ["other"]):
            await wakes.wake("s1", reason="reconcile")  # what the reconciler does
            await assert_eventually(lambda: _answered(store, "s1"), within=20)
    assert not await _blocked(store, "s1")  # the report is withdrawn
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.result == "brain-other"
    wakes.close()
    await control.aclose()


async def _advertised(routes: Routes, route: str) -> bool:
    return route in await routes.live()


async def _answered(store: SessionStore, session_id: str) -> bool:
    handle = await store.session(session_id)
    submission = await handle.submission("r1")
    return submission is not None and submission.status is SubmissionStatus.ANSWERED


async def _blocked(store: SessionStore, session_id: str) -> object:
    control = (await store.session(session_id)).state.documents.get(CONTROL_DOCUMENT)
    return control.body.get("blocked") if control and isinstance(control.body, dict) else None


async def test_a_brain_advertises_its_route_again_after_redis_comes_back(
    tmp_path: Path,
) -> None:
    """Redis restarting (the compose deployment's fault) broke a Brain's advertising for
    good: redis-py's ConnectionError is no OSError, so it ended the advertising task, the
    route lapsed 15 s later and the Brain stayed not ready (``route … is not
    advertised``) and unwoken while it ran."""
    url = require("BH_REDIS_URL", "Redis")
    redis = urlsplit(url)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    async with TcpGate(redis.hostname or "127.0.0.1", redis.port or 6379) as gate:
        gated = url.replace(redis.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        lifetime = 3.0  # the default 15 s, shortened: the same cycle, 5 times faster
        async with brain(
            store, gated, prefix, "brain-echo", ["echo"], lifetime=lifetime
        ) as service:
            gate.shut()
            await asyncio.sleep(lifetime / 3 + 0.5)  # an advertisement meets it
            gate.open()
            await asyncio.sleep(lifetime + 0.5)  # what was advertised before lapsed
            control = redis_client.connect(url)
            try:
                routes = Routes(control, prefix=prefix)
                await assert_eventually(lambda: _advertised(routes, service.route), within=10)
            finally:
                await control.aclose()
    await store.close()


async def test_a_brain_started_while_redis_is_away_advertises_once_it_is_back(
    tmp_path: Path,
) -> None:
    """A Brain's first advertisement failing (Redis away at start, or its connection cut
    before the reply was read — a clean-clone run cut it as the test shut its gate) ended
    ``run`` with ``StoreUnavailable``: the Brain took no wake again and was never ready.
    The first advertisement is one more try of the advertising loop."""
    url = require("BH_REDIS_URL", "Redis")
    redis = urlsplit(url)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    registry = Registry()
    registry.add(kind("echo", {"start": _answer}))
    async with TcpGate(redis.hostname or "127.0.0.1", redis.port or 6379) as gate:
        gated = url.replace(redis.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        gate.shut()
        client = redis_client.connect(gated)
        routes = Routes(client, prefix=prefix, lifetime=3.0)
        wakes = RQWakes(gated, prefix=prefix, router=SessionRouter(store, routes))
        runner = Kernel(store, registry, LocalDispatcher(), SessionClient(store)).runner("b")
        service = BrainService(
            runner=runner,
            leases=RedisLeases(client, prefix=prefix),
            wakes=wakes,
            redis_url=gated,
            concurrency=1,
            lease_ttl=timedelta(seconds=2),
            routes=routes,
        )
        running = asyncio.create_task(service.run())
        try:
            await asyncio.sleep(1.5)
            assert not running.done(), running.exception()
            gate.open()
            control = redis_client.connect(url)
            try:
                watched = Routes(control, prefix=prefix)
                await assert_eventually(lambda: _advertised(watched, service.route), within=10)
                await service.holds_its_route()
            finally:
                await control.aclose()
        finally:
            await service.shutdown()
            await running
            wakes.close()
            await client.aclose()
    await store.close()
