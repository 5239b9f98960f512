"""Routing by what a Brain offers beyond its task kinds (invariant 10): the versions it
can migrate, and its model configuration. An agent session needs a Brain with a model
(the one its submission names, if any); a Brain without one never takes it, and the
session says why it waits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brain.outcome import Done
from brain.registry import Migration, Registry, TaskKind
from coordination import redis_client
from coordination.routes import Routes, SessionRouter, model_offers, route_of
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.services import require

pytestmark = pytest.mark.redis


async def _done(ctx: object) -> Done:
    return Done(result=None)


def test_a_brain_offers_the_versions_it_can_migrate() -> None:
    registry = Registry()
    registry.add(TaskKind(name="job", version=3, phases={"start": _done}))
    registry.add_migration(Migration("job", 1, 2, lambda task: task))
    registry.add_migration(Migration("job", 2, 3, lambda task: task))
    registry.add_migration(Migration("gone", 1, 2, lambda task: task))  # leads nowhere
    assert registry.compatibility() == ("job@1", "job@2", "job@3")


def test_a_model_is_offered_by_name_and_as_any() -> None:
    assert model_offers("qwen-max") == ("model:any", "model:qwen-max")
    assert model_offers(None) == ()


@pytest.fixture
async def setting(tmp_path: Path) -> AsyncIterator[tuple[SessionStore, Routes]]:
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    try:
        yield store, Routes(client, prefix=f"t{uuid.uuid4().hex[:8]}")
    finally:
        await client.aclose()
        await store.close()


async def test_an_agent_session_goes_only_to_a_brain_with_a_model(
    setting: tuple[SessionStore, Routes],
) -> None:
    store, routes = setting
    router = SessionRouter(store, routes)
    await SessionClient(store).submit("s1", "r1", {"text": "hello"})
    await routes.advertise(["agent@1", "tool-call@1"])  # a Brain without a model
    assert await router("s1") is None
    blocked = (await store.session("s1")).state.documents["control"].body
    assert isinstance(blocked, dict)
    assert "model:any" in str(blocked["blocked"])
    with_model = await routes.advertise(["agent@1", "tool-call@1", *model_offers("m1")])
    assert await router("s1") == with_model


async def test_a_submission_naming_a_model_waits_for_a_brain_with_that_model(
    setting: tuple[SessionStore, Routes],
) -> None:
    store, routes = setting
    router = SessionRouter(store, routes)
    await SessionClient(store).submit("s2", "r1", {"text": "hello", "model": "big"})
    await routes.advertise(["agent@1", "tool-call@1", *model_offers("small")])
    assert await router("s2") is None
    big = await routes.advertise(["agent@1", "tool-call@1", *model_offers("big")])
    assert big == route_of(["agent@1", "tool-call@1", "model:any", "model:big"])
    assert await router("s2") == big


async def test_routers_waking_a_blocked_session_at_once_report_it_once(
    setting: tuple[SessionStore, Routes], tmp_path: Path
) -> None:
    """Three schedulers' routers see the same blocked session at once: one report."""
    store, routes = setting
    await SessionClient(store).submit("s3", "r1", {"task": {"kind": "rare", "input": None}})
    await routes.advertise(["agent@1"])
    stores = [await open_store(f"sqlite:///{tmp_path}/store.db") for _ in range(3)]
    routers = [SessionRouter(each, routes) for each in stores]
    assert await asyncio.gather(*(router("s3") for router in routers)) == [None] * 3
    reports = [record.seq async for record in store.history("s3") if record.commit.documents]
    assert len(reports) == 1, reports
    for each in stores:
        await each.close()


async def test_a_wake_of_a_session_without_open_work_reports_nothing(
    setting: tuple[SessionStore, Routes],
) -> None:
    """A late timer or result while no Brain advertises: nothing is blocked, and a
    session that does not exist is not created by the report."""
    store, routes = setting
    assert await SessionRouter(store, routes)("nobody") is None
    assert (await store.session("nobody")).seq == 0
