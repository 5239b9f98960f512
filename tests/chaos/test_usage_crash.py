"""SIGKILL a Brain between a model's answer and its commit, and right after the commit:
the usage of each recorded response is counted once, on the task and on the session;
and a session budget shared by agents side by side holds across the crash."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from brain.model.scripted import Script, scripted_app
from contracts import Budget, EntryKind, SubmissionStatus
from session_store import open_store
from session_store.submissions import SessionClient
from session_store.usage import usage_of
from tests.support.http_server import serve
from tests.support.processes import brain_run, model_env

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SCRIPT = Script.model_validate(
    {
        "model": "m",
        "turns": [
            {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
            {"content": "done"},
        ],
    }
)


@pytest.mark.parametrize("crash_at", ["call:after:model#2", "commit:agent:request#1"])
async def test_usage_is_counted_once_per_recorded_response(tmp_path: Path, crash_at: str) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    await SessionClient(store).submit("s1", "r1", "please echo")
    plugin = ("tests.support.agent_plugins:plugin",)
    async with serve(scripted_app(SCRIPT, token="t")) as model_url:
        env = model_env(
            model_url,
            BH_MODEL_PRICE_INPUT="1",
            BH_MODEL_PRICE_OUTPUT="4",
        )
        killed = await asyncio.to_thread(
            brain_run, url, plugins=plugin, env={**env, "BH_CRASH_AT": crash_at}
        )
        assert killed.returncode == -signal.SIGKILL
        done = await asyncio.to_thread(brain_run, url, plugins=plugin, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    handle = await store.session("s1")
    responses = [e.content for e in await handle.entries() if e.kind is EntryKind.MODEL_RESPONSE]
    await store.close()
    recorded = [r["usage"] for r in responses]  # type: ignore[index]
    task = handle.state.tasks["root.r1"].usage
    assert task.calls == len(recorded) == 2
    assert task.input_tokens == sum(u["prompt_tokens"] for u in recorded)
    assert task.output_tokens == sum(u["completion_tokens"] for u in recorded)
    assert task.cost > 0 and usage_of(handle.state).total == task


ANSWER = Script.model_validate({"model": "m", "turns": [{"content": "a short answer, " * 12}]})


@pytest.mark.parametrize("crash_at", ["call:after:model#1", "commit:agent:request#1"])
async def test_a_budget_shared_by_agents_holds_across_a_crash(
    tmp_path: Path, crash_at: str
) -> None:
    # Four agents ask at once under a 100-token fail budget, about 59 tokens a call: the
    # first call is held at its estimate and the other three wait for it. The Brain
    # dies with the first answer in hand, or right after committing it. The next Brain
    # starts with nothing held; the budget still admits exactly one call past it.
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    client = SessionClient(store)
    await client.set_budget("s1", Budget(tokens=100, on_exceed="fail"))
    for n in range(4):
        await client.submit("s1", f"r{n}", f"question {n}", conversation_id=f"c{n}")
    async with serve(scripted_app(ANSWER, token="t")) as model_url:
        env = model_env(model_url)
        killed = await asyncio.to_thread(brain_run, url, env={**env, "BH_CRASH_AT": crash_at})
        assert killed.returncode == -signal.SIGKILL
        done = await asyncio.to_thread(brain_run, url, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    handle = await store.session("s1")
    responses = [e.content for e in await handle.entries() if e.kind is EntryKind.MODEL_RESPONSE]
    await store.close()
    submissions = handle.state.submissions.values()
    answered = [s for s in submissions if s.status is SubmissionStatus.ANSWERED]
    refused = [s for s in submissions if s.error is not None and s.error.code == "budget_exceeded"]
    assert len(responses) == len(answered) == 2 and len(refused) == 2
    used = usage_of(handle.state).total
    recorded = [r["usage"] for r in responses]  # type: ignore[index]
    assert used.calls == 2 and used.tokens == sum(u["total_tokens"] for u in recorded)
