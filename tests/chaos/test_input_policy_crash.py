"""SIGKILL a Brain around a message joining a running agent (policy enqueue): after the
commit that attached it, and after the model answered but before that answer was
committed. The next Brain answers both messages once, with one agent task."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from brain.model.scripted import Script, scripted_app
from contracts import Handling, SubmissionStatus
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve
from tests.support.processes import brain_run, model_env

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SCRIPT = Script.model_validate(
    {"model": "m", "turns": [{"content": "both read; last: {last_user_message}"}]}
)


@pytest.mark.parametrize("crash_at", ["commit:kernel#1", "call:after:model#1"])
async def test_a_joined_message_is_answered_once_after_a_kill(
    tmp_path: Path, crash_at: str
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    client = SessionClient(store)
    await client.submit("s1", "r1", {"text": "hello"})
    await client.submit("s1", "r2", {"text": "and this", "policy": "enqueue"})
    async with serve(scripted_app(SCRIPT, token="t")) as model_url:
        env = model_env(model_url)
        killed = await asyncio.to_thread(brain_run, url, env={**env, "BH_CRASH_AT": crash_at})
        assert killed.returncode == -signal.SIGKILL
        done = await asyncio.to_thread(brain_run, url, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    state = (await store.session("s1")).state
    await store.close()
    first, joined = state.submissions["r1"], state.submissions["r2"]
    assert joined.handling is Handling.ENQUEUED and joined.task_id == "root.r1"
    assert first.status is joined.status is SubmissionStatus.ANSWERED
    assert first.answer == joined.answer == "both read; last: and this"
    assert sorted(t.id for t in state.tasks.values() if t.kind == "agent") == ["root.r1"]
