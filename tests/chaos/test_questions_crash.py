"""SIGKILL a Brain around a question's commit boundaries: after the question is
committed, after the answer is accepted but before it is applied, right after it is
applied, and between two answers that both landed. Every time the answer is applied
once and the task continues from the right phase."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from contracts import Commit, Submission, SubmissionStatus, TaskStatus
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.processes import brain_run

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

PLUGIN = "tests.support.crash_plugins:ask"


def brain(store_url: str, log: Path, crash_at: str | None = None) -> int:
    env = {"BH_TEST_POISON_LOG": str(log)}
    if crash_at is not None:
        env["BH_CRASH_AT"] = crash_at
    return brain_run(store_url, plugins=(PLUGIN,), env={**os.environ, **env}).returncode


async def submit(store_url: str) -> None:
    store = await open_store(store_url)
    await SessionClient(store).submit("s1", "r1", {"task": {"kind": "ask"}})
    await store.close()


async def answer(store_url: str, request_id: str, value: str) -> Submission:
    store = await open_store(store_url)
    try:
        return await SessionClient(store).answer("s1", request_id, "q1", value, by=request_id)
    finally:
        await store.close()


async def state(store_url: str) -> Any:
    store = await open_store(store_url, read_only=True)
    try:
        return (await store.session("s1")).state
    finally:
        await store.close()


def phases_run(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def settled(store_url: str, log: Path, winner: str) -> None:
    """The task took ``winner``'s answer once and ran its last phase once to the end."""
    final = await state(store_url)
    root = final.tasks["root.r1"]
    assert root.status is TaskStatus.TERMINAL and root.result == {"value": winner}, root
    assert list(root.answers) == ["q1"]
    assert final.submissions["r1"].answer == {"value": winner}
    told = [line for line in phases_run(log) if line.startswith("told")]
    assert told == [f"told {winner}"], "the phase after the answer ended exactly once"


async def test_a_kill_after_the_question_is_committed_loses_nothing(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path}/s.db", tmp_path / "phases.log"
    await submit(url)
    assert brain(url, log, "commit:ask:start#1") == -signal.SIGKILL
    waiting = (await state(url)).tasks["root.r1"]
    assert waiting.status is TaskStatus.WAITING and waiting.wait.question.id == "q1"
    assert brain(url, log) == 0
    seq = (await state(url)).seq
    assert brain(url, log) == 0 and (await state(url)).seq == seq, "waiting writes nothing"
    await answer(url, "a1", "blue")
    assert brain(url, log) == 0
    await settled(url, log, "blue")


@pytest.mark.parametrize(
    "crash_at",
    [
        "commit:claim#1",  # the answer is accepted, the Brain dies before applying it
        "commit:kernel#1",  # dies right after the commit that applied it
        "ask:told#1",  # dies in the phase after the answer, before its outcome
    ],
)
async def test_a_kill_around_applying_the_answer_applies_it_once(
    tmp_path: Path, crash_at: str
) -> None:
    url, log = f"sqlite:///{tmp_path}/s.db", tmp_path / "phases.log"
    await submit(url)
    assert brain(url, log) == 0
    await answer(url, "a1", "blue")
    assert brain(url, log, crash_at) == -signal.SIGKILL
    assert brain(url, log) == 0
    await settled(url, log, "blue")
    assert (await state(url)).submissions["a1"].status is SubmissionStatus.ANSWERED


async def test_a_kill_between_two_landed_answers_applies_the_first_only(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path}/s.db", tmp_path / "phases.log"
    await submit(url)
    assert brain(url, log) == 0
    store = await open_store(url)  # an ingress that does not check lets both land
    handle = await store.session("s1")
    for request_id, value in (("a1", "blue"), ("a2", "red")):
        body = {"question_id": "q1", "value": value, "by": request_id}
        sub = Submission(request_id=request_id, input={"answer": body})
        await handle.commit(Commit(submissions=(sub,)), fence=None)
    await store.close()
    assert brain(url, log, "commit:kernel#1") == -signal.SIGKILL
    assert brain(url, log) == 0
    await settled(url, log, "blue")
    final = await state(url)
    refused = final.submissions["a2"]
    assert refused.status is SubmissionStatus.FAILED and refused.error.code == "already_answered"
    assert json.loads(json.dumps(final.submissions["a1"].answer))["applied"] is True
