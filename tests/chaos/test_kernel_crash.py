"""Crash behaviour of the kernel across real processes: the restart limit, sleeps that
survive a kill, and tasks no running Brain can handle."""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from contracts import Outcome, TaskStatus
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.processes import brain_run

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def worker(store_url: str, *plugins: str, **env: str) -> tuple[int, dict[str, Any] | None]:
    done = brain_run(
        store_url,
        plugins=tuple(f"tests.support.crash_plugins:{plugin}" for plugin in plugins),
        env={**os.environ, **env},
    )
    report = json.loads(done.stdout) if done.returncode == 0 else None
    return done.returncode, report


async def submit(store_url: str, kind: str, version: int = 1) -> None:
    store = await open_store(store_url)
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": kind, "version": version}})
    await store.close()


async def root(store_url: str) -> Any:
    store = await open_store(store_url, read_only=True)
    task = (await store.session("s1")).state.tasks["root.r1"]
    await store.close()
    return task


async def test_poison_phase_fails_after_the_restart_limit(tmp_path: Path) -> None:
    store_url, log = f"sqlite:///{tmp_path}/store.db", tmp_path / "attempts.log"
    await submit(store_url, "poison")
    codes = [worker(store_url, "poison", BH_TEST_POISON_LOG=str(log))[0] for _ in range(4)]
    assert codes == [-signal.SIGKILL] * 3 + [0], "three crashes, then the kernel gives up"
    assert log.read_text().splitlines() == ["attempt 1", "attempt 2", "attempt 3"]
    task = await root(store_url)
    assert task.outcome is Outcome.FAILED and task.error.code == "restart_limit"
    assert "crashed its executor 3 times" in task.error.message


async def test_retries_do_not_count_towards_the_restart_limit(tmp_path: Path) -> None:
    # Issue 6, defect 6: two retried attempts and one crash are one crash, not three.
    store_url, log = f"sqlite:///{tmp_path}/store.db", tmp_path / "attempts.log"
    await submit(store_url, "stumble")
    codes = [worker(store_url, "stumble", BH_TEST_POISON_LOG=str(log))[0] for _ in range(2)]
    assert codes == [-signal.SIGKILL, 0]
    assert log.read_text().splitlines() == [f"attempt {n}" for n in (1, 2, 3, 4)]
    task = await root(store_url)
    assert task.outcome is Outcome.SUCCEEDED and task.result == "done at attempt 4"


async def test_a_sleep_survives_a_kill_and_wakes_on_time(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path}/store.db"
    await submit(store_url, "nap")
    code, _ = worker(store_url, "nap", BH_CRASH_AT="commit:nap:start#1")
    assert code == -signal.SIGKILL
    sleeping = await root(store_url)
    assert sleeping.status is TaskStatus.SLEEPING
    code, report = worker(store_url, "nap")
    assert code == 0 and report is not None and not report["active"]
    woke = await root(store_url)
    assert datetime.fromisoformat(woke.result) >= sleeping.sleep.until, "not before its time"


async def test_unknown_kind_waits_untouched_for_a_compatible_brain(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path}/store.db"
    await submit(store_url, "later", version=2)
    code, report = worker(store_url)  # a Brain without the "later" kind
    assert code == 0 and report is not None and report["active"]
    assert "later@2" in report["blocked"]["root.r1"]
    untouched = await root(store_url)
    assert (untouched.status, untouched.rev, untouched.attempts) == (TaskStatus.PENDING, 1, 0)
    code, report = worker(store_url, "later")
    assert code == 0 and report is not None and not report["active"]
    assert (await root(store_url)).result == "ran later@2"
