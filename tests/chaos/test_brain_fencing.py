"""Fencing end to end with real Brain worker processes: SIGSTOP a Brain that holds a
session until another Brain has claimed it, SIGCONT it — nothing it does afterwards
enters the session (invariant 6)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts import CommitRecord, Outcome
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.routes import Routes, SessionRouter
from coordination.wakes import RQWakes
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.processes import ROOT
from tests.support.services import free_ports, require

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.sqlite, pytest.mark.slow]

METRICS_TOKEN = "fencing-test-scrape-token-0123456789"


async def test_a_stopped_brain_resumed_after_a_takeover_commits_nothing(tmp_path: Path) -> None:
    redis_url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = await open_store(store_url)
    client = redis_client.connect(redis_url)
    leases = RedisLeases(client, prefix=prefix)
    # Brain workers take only the wakes of their route: wake through the router
    wakes = RQWakes(
        redis_url, prefix=prefix, router=SessionRouter(store, Routes(client, prefix=prefix))
    )
    args = ("--plugin", "tests.support.brain_plugins:plugin", "--lease-seconds", "1")
    (port,) = free_ports(1)
    first = _brain(store_url, redis_url, prefix, tmp_path / "a.log", args, probe_port=port)
    second: subprocess.Popen[bytes] | None = None
    try:
        await SessionClient(store).submit("s1", "r1", {"task": {"kind": "slow", "input": 3}})
        # until Brain A has advertised its route, a wake finds nobody: wake again
        await assert_eventually(lambda: _woken_and_held(wakes, leases), within=30)
        holder_a = await leases.holder("s1")
        # Stop A inside its 3 s phase, not inside a commit: a process frozen while it holds
        # SQLite's write lock would stall every writer of that file (the embedded store is
        # one host's; a shared store is S3 or DynamoDB), which is not what this tests.
        await assert_eventually(lambda: _running_under(store, holder_a), within=30)
        first.send_signal(signal.SIGSTOP)  # mid-phase, holding the lease
        await assert_eventually(lambda: _free(leases), within=10)  # the lease lapses
        second = _brain(store_url, redis_url, prefix, tmp_path / "b.log", args)
        # the reconciler's repeated wakes (a wake job the frozen Brain had taken holds the
        # session's pending marker for a few seconds)
        await assert_eventually(lambda: _woken_and_taken(wakes, store, holder_a), within=30)
        first.send_signal(signal.SIGCONT)  # A wakes up mid-phase with a stale fence
        await assert_eventually(lambda: _answered(store), within=30)
        await asyncio.sleep(4)  # A's phase (3 s) ends now: its outcome must be refused
        dropped = await _drives_dropped(port)
    finally:
        for process in (first, second):
            if process is not None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
                process.wait(timeout=30)
        await wakes_close(wakes)
        await client.aclose()
    records = await _log(store)
    claims = [r for r in records if r.claim]
    # A's claim, then B's; A may legitimately claim again later, with a new fence
    assert len(claims) >= 2 and claims[0].holder == holder_a and claims[1].holder != holder_a
    taken_at = claims[1].seq
    late = [r for r in records if r.seq > taken_at and r.writer_fence == claims[0].fence]
    assert late == [], "a stale holder's commit entered the session"
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.outcome is Outcome.SUCCEEDED
    assert task.result == {"by": claims[1].holder}
    # A counted the drive it lost: dropped by fencing, or before its lease could lapse
    assert dropped["fenced"] + dropped["lease_lost"] >= 1, dropped
    await store.close()


async def _drives_dropped(port: int) -> dict[str, float]:
    """Brain A's ``brainhands_brain_drives_total`` by outcome, scraped from its port."""
    auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    async with httpx.AsyncClient() as http:
        scraped = await http.get(f"http://127.0.0.1:{port}/metrics", headers=auth)
    scraped.raise_for_status()
    found = {"fenced": 0.0, "lease_lost": 0.0}
    for family in text_string_to_metric_families(scraped.text):
        for sample in family.samples:
            if sample.name == "brainhands_brain_drives_total":
                found[sample.labels["outcome"]] = sample.value
    return found


def _brain(
    store_url: str,
    redis_url: str,
    prefix: str,
    log: Path,
    args: tuple[str, ...],
    probe_port: int | None = None,
) -> subprocess.Popen[bytes]:
    probes = {"BH_PROBE_PORT": str(probe_port), "BH_METRICS_TOKEN": METRICS_TOKEN}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "brain",
                "worker",
                "--store",
                store_url,
                "--redis",
                redis_url,
                "--namespace",
                prefix,
                *args,
            ],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "BH_NATS_URL"}
            | {"PYTHONUNBUFFERED": "1"}
            | (probes if probe_port is not None else {}),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def wakes_close(wakes: RQWakes) -> None:
    await asyncio.to_thread(wakes.close)


async def _woken_and_held(wakes: RQWakes, leases: RedisLeases) -> bool:
    await wakes.wake("s1", reason="submission")
    return await leases.holder("s1") is not None


async def _running_under(store: SessionStore, holder: str | None) -> bool:
    """A's claim and its phase's start are committed: A is inside the phase."""
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1")
    return handle.holder == holder and task is not None and task.status.value == "running"


async def _free(leases: RedisLeases) -> bool:
    return await leases.holder("s1") is None


async def _woken_and_taken(wakes: RQWakes, store: SessionStore, holder: str | None) -> bool:
    await wakes.wake("s1", reason="reconcile")
    return await _claimed_by_other(store, holder)


async def _claimed_by_other(store: SessionStore, holder: str | None) -> bool:
    handle = await store.session("s1")
    return handle.holder is not None and handle.holder != holder


async def _answered(store: SessionStore) -> bool:
    handle = await store.session("s1")
    submission = await handle.submission("r1")
    return submission is not None and submission.status.is_final


async def _log(store: SessionStore) -> list[CommitRecord]:
    return [record async for record in store.history("s1")]
