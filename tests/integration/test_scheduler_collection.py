"""The scheduler's workspace collection pass (``scheduler.collection``) on real Redis
(the turn) over a SQLite store: it deletes what a session's retention lets go, keeps
the head's files, is taken by one scheduler of several per period, is logged and
counted in the scheduler's metrics."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from contracts import NotFound
from contracts.workspace import WorkspaceRetention
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.wakes import RQWakes
from runtime.cancellation import cancel_and_wait
from scheduler.metrics import SchedulerMetrics
from scheduler.service import Scheduler, SchedulerSettings
from scheduler.turns import Turns
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.services import require
from tests.support.workspaces import apply_version

pytestmark = [pytest.mark.redis, pytest.mark.sqlite]

FIRST = {"calc.py": b"def add(a, b):\n    return a - b\n", "README.md": b"# calc\n"}
FIXED = {**FIRST, "calc.py": b"def add(a, b):\n    return a + b\n"}


@dataclass
class Fleet:
    store: SessionStore
    schedulers: tuple[Scheduler, Scheduler]


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    url = require("BH_REDIS_URL", "Redis")
    client = redis_client.connect(url)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    wakes = RQWakes(url, prefix=prefix)
    # no writer runs beside these collections: no grace period needed
    store = await open_store(f"sqlite:///{tmp_path}/store.db", workspace_grace_seconds=0)
    settings = SchedulerSettings(collect_every=timedelta(hours=1))
    one, other = (
        Scheduler(
            store=store,
            bus=None,
            wakes=wakes,
            leases=RedisLeases(client, prefix=prefix),
            turns=Turns(client, prefix=prefix),
            settings=settings,
        )
        for _ in range(2)
    )
    try:
        yield Fleet(store, (one, other))
    finally:
        await store.close()
        wakes.close()
        await client.aclose()


async def test_a_pass_deletes_what_retention_lets_go_and_keeps_the_head(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    store = fleet.store
    first, _ = await apply_version(store, "w1", FIRST, operation_id="op-1")
    head, _ = await apply_version(store, "w1", FIXED, operation_id="op-2")
    await SessionClient(store).set_retention("w1", WorkspaceRetention(keep_versions=1))
    one, other = fleet.schedulers

    with caplog.at_level(logging.INFO, logger="scheduler.collection"):
        done = await one.collection.collect()
    # the first version's manifest and the one file only it named
    assert done is not None and done.blobs == 2, done
    assert "workspace collection: 0 version(s) and 2 blob(s) deleted" in caplog.text
    assert await other.collection.collect() is None  # the fleet's one pass this period

    for entry in (await store.workspaces.manifest(head)).entries:
        assert await store.workspaces.file(entry) == FIXED[entry.path]
    with pytest.raises(NotFound):
        await store.workspaces.manifest(first)

    scrape = generate_latest(SchedulerMetrics(one).registry).decode()
    assert 'brainhands_scheduler_workspace_collected_total{what="blobs"} 2.0' in scrape
    assert (one.collection.passes, other.collection.passes) == (1, 0)


async def test_a_pass_keeps_every_version_the_default_retention_keeps(fleet: Fleet) -> None:
    store = fleet.store
    first, _ = await apply_version(store, "w1", FIRST, operation_id="op-1")
    await apply_version(store, "w1", FIXED, operation_id="op-2")
    done = await fleet.schedulers[0].collection.collect()
    assert done is not None and done.blobs == 0, done
    assert [e.path for e in (await store.workspaces.manifest(first)).entries] == sorted(FIRST)


async def test_the_scheduler_runs_the_pass_every_period(fleet: Fleet) -> None:
    store = fleet.store
    first, _ = await apply_version(store, "w1", FIRST, operation_id="op-1")
    await apply_version(store, "w1", FIXED, operation_id="op-2")
    await SessionClient(store).set_retention("w1", WorkspaceRetention(keep_versions=1))
    pass_ = fleet.schedulers[0].collection
    pass_.every = timedelta(milliseconds=50)
    running = asyncio.create_task(pass_.run())

    async def collected() -> bool:
        return pass_.collected["blobs"] == 2 and pass_.passes >= 2

    try:
        await assert_eventually(collected, said=lambda: f"{pass_.collected}, {pass_.passes}")
    finally:
        await cancel_and_wait(running)
    with pytest.raises(NotFound):
        await store.workspaces.manifest(first)
