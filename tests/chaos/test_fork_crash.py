"""SIGKILL the Brain that runs a fork, at its claim, before its new operation, and right
after its outcome: the operation committed before the fork point is never run again in
the fork, the fork's new operation has an id of its own and enters it once, and the
original stays as it was."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.processes import brain_run

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

PLUGIN = ("tests.support.fork_plugins:plugin",)


@pytest.mark.parametrize(
    "crash_at", ["commit:claim#1", "call:before:send#1", "commit:twice:second#1"]
)
async def test_a_fork_recovers_from_a_crash_and_repeats_nothing_committed_before_it(
    tmp_path: Path, crash_at: str
) -> None:
    url, ledger = f"sqlite:///{tmp_path}/s.db", tmp_path / "sent.log"
    env = {**os.environ, "BH_TEST_TOOL_LOG": str(ledger)}
    store = await open_store(url)
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "twice"}})
    done = await asyncio.to_thread(brain_run, url, plugins=PLUGIN, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    original = [record async for record in store.history("s1")]
    at = next(r.seq for r in original if any(t.phase == "second" for t in r.commit.tasks))
    await store.fork("s1", at=at, into="s2")
    await store.flush()

    crashed = await asyncio.to_thread(
        brain_run, url, plugins=PLUGIN, env={**env, "BH_CRASH_AT": crash_at}, session="s2"
    )
    assert crashed.returncode == -signal.SIGKILL
    again = await asyncio.to_thread(brain_run, url, plugins=PLUGIN, env=env, session="s2")
    assert again.returncode == 0, again.stderr[-2000:]

    fork = await store.session("s2")
    answer = fork.state.submissions["r1"].answer
    applied = [op async for r in store.history("s2") for op in r.commit.applied_operations]
    unchanged = [record async for record in store.history("s1")] == original
    await store.close()
    sent = [line.split() for line in ledger.read_text().splitlines()]
    by_original = {to: op for to, op in sent[:2]}
    assert isinstance(answer, dict) and answer["m1"] == by_original["m1"], "m1 reused"
    assert answer["m2"] != by_original["m2"], "the fork's m2 is its own operation"
    assert [to for to, op in sent].count("m1") == 1, "m1 never ran again"
    assert {op for to, op in sent[2:]} == {answer["m2"]}, "only the fork's m2 ran in the fork"
    assert applied.count(answer["m2"]) == 1, "applied once in the fork"
    assert unchanged, "the original's log is untouched"
