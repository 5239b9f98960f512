"""A message for a conversation whose agent is still at work, against a scripted model
over real HTTP: ``enqueue`` joins the running agent (its next model call includes the
message; a message that came after the last call gets a turn of its own), ``interrupt``
abandons the running model call (recorded as an interruption, never used), ``reject``
is refused at the door and never enters the conversation. Every message is answered
once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from brain.model.scripted import Script, ScriptedModel
from brain.model.settings import ModelSettings
from brain.runner import DriveReport
from brain.worker import WorkerSettings, run_worker
from contracts import EntryKind, Handling, InputPolicy, SubmissionStatus
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.http_server import serve

pytestmark = pytest.mark.sqlite

PLUGIN = "tests.support.agent_plugins:plugin"


def script(*turns: dict[str, Any]) -> Script:
    return Script.model_validate({"model": "m", "turns": list(turns)})


@asynccontextmanager
async def brain(store: SessionStore, model: ScriptedModel) -> AsyncIterator[asyncio.Task[Any]]:
    """A Brain driving s1 to idle in the background, against ``model``."""
    async with serve(model.app()) as url:
        settings = WorkerSettings(
            store_url=store.backend.description,
            session_id="s1",
            plugins=(PLUGIN,),
            model=ModelSettings(base_url=f"{url}/v1", api_key=SecretStr("t"), model="m"),
        )
        yield asyncio.create_task(run_worker(settings))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(f"sqlite:///{tmp_path}/store.db")
    yield opened
    await opened.close()


async def in_flight(model: ScriptedModel, requests: int) -> None:
    """Until the model has received ``requests`` requests."""

    async def seen() -> bool:
        return len(model.received) >= requests

    await assert_eventually(seen, within=10)


async def submissions(store: SessionStore) -> dict[str, Any]:
    return dict((await store.session("s1")).state.submissions)


async def agents(store: SessionStore) -> list[str]:
    state = (await store.session("s1")).state
    return sorted(t.id for t in state.tasks.values() if t.kind == "agent")


async def test_a_message_that_arrives_during_the_last_model_call_gets_a_turn_of_its_own(
    store: SessionStore,
) -> None:
    model = ScriptedModel(
        script(
            {"content": "first answer", "delay_seconds": 1.5},
            {"content": "you said: {last_user_message}"},
        ),
        token="t",
    )
    client = SessionClient(store)
    await client.submit("s1", "r1", {"text": "hello"})
    async with brain(store, model) as running:
        await in_flight(model, 1)
        await client.submit("s1", "r2", {"text": "and another thing"})
        report: DriveReport = await asyncio.wait_for(running, 30)
    assert not report.active
    subs = await submissions(store)
    assert (subs["r1"].answer, subs["r2"].answer) == ("first answer", "you said: and another thing")
    assert subs["r2"].handling is Handling.STARTED, "joined, unseen, then a turn of its own"
    assert await agents(store) == ["root.r1", "root.r2"]


async def test_an_enqueued_message_is_answered_by_the_running_agent_that_saw_it(
    store: SessionStore,
) -> None:
    # The agent is inside a tool call when the message arrives; its next model call
    # sees it, and that one answer answers both messages.
    model = ScriptedModel(
        script(
            {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}], "delay_seconds": 1.5},
            {"content": "both done; last said: {last_user_message}"},
        ),
        token="t",
    )
    client = SessionClient(store)
    await client.submit("s1", "r1", {"text": "hello"})
    async with brain(store, model) as running:
        await in_flight(model, 1)
        await client.submit("s1", "r2", {"text": "also this", "policy": "enqueue"})
        await asyncio.wait_for(running, 30)
    subs = await submissions(store)
    assert subs["r2"].handling is Handling.ENQUEUED and subs["r2"].task_id == "root.r1"
    answer = "both done; last said: also this"
    assert (subs["r1"].answer, subs["r2"].answer) == (answer, answer)
    assert await agents(store) == ["root.r1"]
    assert len(model.received) == 2


async def test_an_interrupting_message_abandons_the_running_model_call(
    store: SessionStore,
) -> None:
    model = ScriptedModel(
        script({"content": "answered: {last_user_message}", "delay_seconds": 3}), token="t"
    )
    client = SessionClient(store)
    await client.submit("s1", "r1", {"text": "write a long essay"})
    async with brain(store, model) as running:
        await in_flight(model, 1)
        await client.submit("s1", "r2", {"text": "stop: just say hi", "policy": "interrupt"})
        await asyncio.wait_for(running, 30)
    subs = await submissions(store)
    assert subs["r2"].handling is Handling.INTERRUPTED
    answer = "answered: stop: just say hi"
    assert (subs["r1"].answer, subs["r2"].answer) == (answer, answer)
    entries = await (await store.session("s1")).entries()
    (note,) = [e for e in entries if e.kind is EntryKind.INTERRUPTION]
    assert note.content["why"] == "a new message interrupted it"  # type: ignore[index]
    responses = [e for e in entries if e.kind is EntryKind.MODEL_RESPONSE]
    assert len(responses) == 1, "the abandoned call left no response"
    assert len(model.received) == 2 and await agents(store) == ["root.r1"]


async def test_a_rejected_message_is_refused_and_never_joins_the_conversation(
    store: SessionStore,
) -> None:
    client = SessionClient(store)
    await client.submit("s1", "r1", {"text": "hello"})
    refused = await client.submit("s1", "r2", {"text": "me too", "policy": "reject"})
    assert refused.status is SubmissionStatus.FAILED and refused.handling is Handling.REJECTED
    assert refused.error is not None and refused.error.code == "busy"
    entries = await (await store.session("s1")).entries()
    assert [e.id for e in entries] == ["in.r1"], "not in the conversation"
    assert await client.submit("s1", "r2", {"text": "me too"}) == refused, "the same request"


async def test_the_session_default_policy_applies_when_a_message_names_none(
    store: SessionStore,
) -> None:
    client = SessionClient(store)
    await client.set_input_policy("s1", InputPolicy.REJECT)
    await client.submit("s1", "r1", {"text": "hello"})
    refused = await client.submit("s1", "r2", "no policy given")
    assert refused.handling is Handling.REJECTED
    taken = await client.submit("s1", "r3", {"text": "mine", "policy": "enqueue"})
    assert taken.status is SubmissionStatus.ACCEPTED, "the message's own policy comes first"
