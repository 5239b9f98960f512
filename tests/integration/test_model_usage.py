"""Token usage and budgets, in the agent loop against the scripted model over real HTTP:
every response's usage is summed on its task and on the session (by model), with the
cost from the configured prices; a budget that is used up stops the next model call
before it is made, and asks whether to go on (or fails, as declared)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from brain.model.scripted import Script, ScriptedModel, scripted_app
from brain.model.settings import ModelSettings
from brain.runner import DriveReport
from brain.worker import WorkerSettings, run_worker
from contracts import Budget, EntryKind, Prices, SubmissionStatus, TaskStatus
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from session_store.usage import usage_of
from tests.support.http_server import serve

pytestmark = pytest.mark.sqlite

PLUGIN = "tests.support.agent_plugins:plugin"
PRICES = Prices(input=2.0, output=8.0)
SCRIPT = Script.model_validate(
    {
        "model": "m",
        "turns": [
            {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
            {"content": "done: {last_tool_result}"},
        ],
    }
)


async def run(store: SessionStore) -> DriveReport:
    async with serve(scripted_app(SCRIPT, token="t")) as url:
        model = ModelSettings(
            base_url=f"{url}/v1", api_key=SecretStr("t"), model="m", prices=PRICES
        )
        settings = WorkerSettings(
            store_url=store.backend.description, session_id="s1", plugins=(PLUGIN,), model=model
        )
        return await run_worker(settings)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(f"sqlite:///{tmp_path}/store.db")
    yield opened
    await opened.close()


async def responses(store: SessionStore) -> list[Any]:
    entries = await (await store.session("s1")).entries()
    return [e.content for e in entries if e.kind is EntryKind.MODEL_RESPONSE]


async def test_usage_is_summed_on_the_task_and_the_session_with_its_cost(
    store: SessionStore,
) -> None:
    await SessionClient(store).submit("s1", "r1", "please echo")
    assert not (await run(store)).active
    calls = [content["usage"] for content in await responses(store)]
    assert len(calls) == 2
    prompt = sum(call["prompt_tokens"] for call in calls)
    completion = sum(call["completion_tokens"] for call in calls)
    state = (await store.session("s1")).state
    task = state.tasks["root.r1"].usage
    assert (task.calls, task.input_tokens, task.output_tokens) == (2, prompt, completion)
    assert task.cost == pytest.approx((prompt * 2.0 + completion * 8.0) / 1_000_000)
    session = usage_of(state)
    assert session.total == task and session.by_model == {"m": task}


async def test_a_used_up_budget_asks_before_the_next_call_and_goes_on_when_allowed(
    store: SessionStore,
) -> None:
    client = SessionClient(store)
    await client.set_budget("s1", Budget(tokens=1))
    await client.submit("s1", "r1", "please echo")
    assert (await run(store)).active, "the second call waits for a decision"
    state = (await store.session("s1")).state
    root = state.tasks["root.r1"]
    assert root.status is TaskStatus.WAITING and root.question is not None
    assert root.question.id == "budget.root.r1.1" and root.question.choices == ("continue", "stop")
    assert len(await responses(store)) == 1, "the call was not made"
    await client.answer("s1", "a1", "budget.root.r1.1", "continue", by="ann")
    assert not (await run(store)).active
    assert (await store.session("s1")).state.submissions["r1"].status is SubmissionStatus.ANSWERED
    assert len(await responses(store)) == 2


async def test_a_stopped_or_failing_budget_fails_the_task(store: SessionStore) -> None:
    client = SessionClient(store)
    await client.submit("s1", "r1", {"text": "please echo", "budget": {"tokens": 1}})
    await run(store)
    await client.answer("s1", "a1", "budget.root.r1.1", "stop", by="ann", why="too dear")
    await run(store)
    failed = (await store.session("s1")).state.submissions["r1"]
    assert failed.status is SubmissionStatus.FAILED and failed.error is not None
    assert failed.error.code == "budget_exceeded"
    assert failed.error.message == "stopped at its model budget by ann: too dear"

    await client.set_budget("s1", Budget(tokens=1, on_exceed="fail"))
    await client.submit("s1", "r2", "again")
    await run(store)
    refused = (await store.session("s1")).state.submissions["r2"]
    assert refused.error is not None and refused.error.code == "budget_exceeded"
    assert "the session's model budget is used up" in refused.error.message


AGENTS = 8
ANSWER = Script.model_validate({"model": "m", "turns": [{"content": "a short answer, " * 12}]})


async def test_concurrent_agents_cannot_each_pass_a_session_budget_meant_for_one(
    store: SessionStore,
) -> None:
    # Eight messages in eight conversations: eight agents whose first model calls start
    # in the same drive. Each call uses about 60 tokens; the budget is 100.
    client = SessionClient(store)
    await client.set_budget("s1", Budget(tokens=100, on_exceed="fail"))
    for n in range(AGENTS):
        await client.submit("s1", f"r{n}", f"question {n}", conversation_id=f"c{n}")
    model = ScriptedModel(ANSWER, token="t")
    async with serve(model.app()) as url:
        settings = WorkerSettings(
            store_url=store.backend.description,
            session_id="s1",
            model=ModelSettings(base_url=f"{url}/v1", api_key=SecretStr("t"), model="m"),
        )
        assert not (await run_worker(settings)).active
    state = (await store.session("s1")).state
    answered = [s for s in state.submissions.values() if s.status is SubmissionStatus.ANSWERED]
    calls = [content["usage"] for content in await responses(store)]
    largest = max(call["total_tokens"] for call in calls)
    used = usage_of(state).total
    assert len(model.received) == len(calls) == len(answered) == 2, "one call past the budget"
    assert used.tokens < 100 + largest, f"{used.tokens} tokens of a 100-token budget"
    refused = [s for s in state.submissions.values() if s.status is SubmissionStatus.FAILED]
    assert len(refused) == AGENTS - 2
    assert all(s.error is not None and s.error.code == "budget_exceeded" for s in refused)
