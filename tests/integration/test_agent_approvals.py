"""Tool calls that need approval, in the agent loop against a scripted model over real
HTTP: nothing is committed for the call (no intent, no operation) until a person
decides; a denial reaches the model as a tool error naming who and why; an approval
runs the call once; an approval after the deadline never runs it; a rule can pick calls
by their arguments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from brain.agent import approval_id
from brain.model.scripted import Script, scripted_app
from brain.model.settings import ModelSettings
from brain.operations import operation_id as operation_id_of
from brain.runner import DriveReport, SessionRunner
from brain.worker import WorkerSettings, build, run_worker
from contracts import (
    Commit,
    EntryKind,
    QuestionExpired,
    QuestionKind,
    Submission,
    SubmissionStatus,
    TaskStatus,
)
from contracts.question import ApprovalRule
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.http_server import serve

pytestmark = pytest.mark.sqlite

PLUGIN = "tests.support.agent_plugins:plugin"
#: echo calls whose text is "launch" need approval; other echo calls run at once
LAUNCH = ApprovalRule(
    tool="echo",
    when={"properties": {"text": {"const": "launch"}}, "required": ["text"]},
    queue="ops",
)
SCRIPT = Script.model_validate(
    {
        "model": "m",
        "turns": [
            {
                "tool_calls": [
                    {"name": "echo", "arguments": {"text": "launch"}},
                    {"name": "echo", "arguments": {"text": "hello"}},
                ]
            },
            {"content": "finished: {last_tool_result}"},
        ],
    }
)
CALL = "root.r1.r1.c0"  # the first call's task


def settings(store: SessionStore, url: str, rule: ApprovalRule = LAUNCH) -> WorkerSettings:
    return WorkerSettings(
        store_url=store.backend.description,
        session_id="s1",
        plugins=(PLUGIN,),
        model=ModelSettings(base_url=f"{url}/v1", api_key=SecretStr("t"), model="m"),
        approvals=(rule,),
    )


async def run(store: SessionStore) -> DriveReport:
    async with serve(scripted_app(SCRIPT, token="t")) as url:
        return await run_worker(settings(store, url))


async def drive_once(
    store: SessionStore, rule: ApprovalRule, clock: Callable[[], datetime]
) -> DriveReport:
    """One drive of a Brain with ``rule`` whose clock is ``clock``."""
    async with serve(scripted_app(SCRIPT, token="t")) as url, AsyncExitStack() as resources:
        built = await build(settings(store, url, rule), resources)
        services = dataclasses.replace(built.runner.services, clock=clock)
        return await SessionRunner(built.store, built.runner.registry, services).drive("s1")


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await open_store(f"sqlite:///{tmp_path}/store.db")
    await SessionClient(opened).submit("s1", "r1", {"text": "launch, then say hello"})
    yield opened
    await opened.close()


async def results(store: SessionStore) -> dict[str, Any]:
    found = {}
    for entry in await (await store.session("s1")).entries():
        if entry.kind is EntryKind.TOOL_RESULT and isinstance(entry.content, dict):
            found[str(entry.task_id)] = entry.content
    return found


async def asked(store: SessionStore) -> str:
    """Run to the approval; check nothing of the call exists yet; the operation id."""
    report = await run(store)
    assert report.active
    state = (await store.session("s1")).state
    call = state.tasks[CALL]
    assert call.status is TaskStatus.WAITING and call.question is not None
    question = call.question
    assert question.kind is QuestionKind.APPROVAL and question.queue == "ops"
    assert question.id == approval_id(CALL)
    assert question.call is not None and question.call.arguments == {"text": "launch"}
    op = operation_id_of("s1", CALL, "call")
    assert question.call.operation_id == op
    assert op not in state.intents and await store.get_operation(op) is None, "not before"
    assert (await results(store))["root.r1.r1.c1"]["ok"] is True, "the other call ran"
    return op


async def test_a_denied_call_never_runs_and_the_model_is_told_who_and_why(
    store: SessionStore,
) -> None:
    op = await asked(store)
    client = SessionClient(store)
    await client.answer("s1", "d1", approval_id(CALL), "deny", by="ops-lead", why="not today")
    report = await run(store)
    assert not report.active
    denied = (await results(store))[CALL]
    assert denied["ok"] is False and denied["error"]["code"] == "denied"
    assert denied["error"]["message"] == "the call was denied by ops-lead: not today"
    assert await store.get_operation(op) is None, "a denied call never becomes an operation"
    answered = (await store.session("s1")).state.submissions["r1"]
    assert answered.status is SubmissionStatus.ANSWERED, "the model answered after the denial"


async def test_an_approved_call_runs_once(store: SessionStore) -> None:
    op = await asked(store)
    await SessionClient(store).answer("s1", "a1", approval_id(CALL), "approve", by="ops-lead")
    report = await run(store)
    assert not report.active
    ran = (await results(store))[CALL]
    assert ran["ok"] is True and ran["output"] == {"echo": "launch", "operation_id": op}
    assert (await store.session("s1")).state.submissions["r1"].status is SubmissionStatus.ANSWERED


async def test_an_approval_after_its_deadline_never_runs_the_call(store: SessionStore) -> None:
    # The deadline passes while no Brain plans (busy Brains, a scheduler outage): an
    # approve after it is refused at the door, and one that got into the log without
    # the door's check (an older API replica) does not count either. The deadline
    # denies; the model reads that; the call never runs.
    asked_at = await store.clock.fresh()
    brief = ApprovalRule.model_validate({**LAUNCH.model_dump(), "within_s": 0.005})
    report = await drive_once(store, brief, lambda: asked_at)  # its clock stands still
    assert report.active
    question = (await store.session("s1")).state.tasks[CALL].question
    assert question is not None and question.deadline is not None
    deadline = question.deadline

    async def passed() -> bool:
        return store.clock.now() > deadline

    await assert_eventually(passed, interval=0.002)
    with pytest.raises(QuestionExpired):
        await SessionClient(store).answer("s1", "a1", question.id, "approve", by="ops-lead")
    body = {"question_id": question.id, "value": "approve", "by": "ops-lead"}
    unchecked = Submission(request_id="a2", input={"answer": body})
    await (await store.session("s1")).commit(Commit(submissions=(unchecked,)), fence=None)
    report = await run(store)
    assert not report.active
    denied = (await results(store))[CALL]
    assert denied["ok"] is False and denied["error"]["code"] == "denied"
    assert denied["error"]["message"].startswith("the call was denied by deadline: no answer")
    assert call_operation() not in (await store.session("s1")).state.intents
    assert await store.get_operation(call_operation()) is None, "it never ran"
    refused = await (await store.session("s1")).submission("a2")
    assert refused is not None and refused.error is not None
    assert refused.error.code == "question_expired"


def call_operation() -> str:
    return operation_id_of("s1", CALL, "call")
