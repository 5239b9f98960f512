"""The agent loop against a scripted model over real HTTP: bad tool calls answered
in-band, large outputs kept in blobs, model outages retried with interruptions on
record, and an operation of unknown outcome parked instead of re-run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from brain.model.scripted import Script, ScriptedModel, scripted_app
from brain.model.settings import ModelSettings
from brain.operations import operation_id as operation_id_of
from brain.runner import DriveReport
from brain.worker import WorkerSettings, run_worker
from contracts import (
    BlobRef,
    Entry,
    EntryKind,
    OperationResult,
    OperationStatus,
    SubmissionStatus,
)
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.http_server import serve

PLUGIN = "tests.support.agent_plugins:plugin"


def script(*turns: dict[str, Any]) -> Script:
    return Script.model_validate({"model": "m", "turns": list(turns)})


async def run(store_url: str, model: Script) -> DriveReport:
    async with serve(scripted_app(model, token="t")) as url:
        settings = WorkerSettings(
            store_url=store_url,
            session_id="s1",
            plugins=(PLUGIN,),
            model=ModelSettings(base_url=f"{url}/v1", api_key=SecretStr("t"), model="m"),
        )
        return await run_worker(settings)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await open_store(f"sqlite:///{tmp_path}/store.db")
    await SessionClient(opened).submit("s1", "r1", {"text": "please act"})
    yield opened
    await opened.close()


def url_of(store: SessionStore) -> str:
    return store.backend.description


async def entries(store: SessionStore, kind: EntryKind) -> list[Entry]:
    return [e for e in await (await store.session("s1")).entries() if e.kind is kind]


async def test_bad_tool_calls_are_answered_in_band(store: SessionStore) -> None:
    bad_calls = script(
        {
            "tool_calls": [
                {"name": "launch_rockets", "arguments": {}},
                {"name": "echo", "arguments": "{not json"},
                {"name": "echo", "arguments": {"text": 42}},
            ]
        },
        {"content": "I could not do that: {last_tool_result}"},
    )
    report = await run(url_of(store), bad_calls)
    assert not report.active
    results = [e.content for e in await entries(store, EntryKind.TOOL_RESULT)]
    codes = sorted(r["error"]["code"] for r in results)  # type: ignore[index]
    assert codes == ["invalid_arguments", "invalid_arguments", "unknown_tool"]
    messages = " ".join(r["error"]["message"] for r in results)  # type: ignore[index]
    assert "available: big, charge_card, echo" in messages
    assert "not valid JSON" in messages and "at text: 42 is not of type 'string'" in messages
    answered = (await store.session("s1")).state.submissions["r1"]
    assert answered.status is SubmissionStatus.ANSWERED


async def test_large_output_is_kept_in_a_blob(store: SessionStore) -> None:
    await run(url_of(store), script({"tool_calls": [{"name": "big"}]}, {"content": "ok"}))
    (result,) = await entries(store, EntryKind.TOOL_RESULT)
    assert isinstance(result.blob, BlobRef) and result.blob.size > 100_000
    assert result.content["output"]["truncated"] is True  # type: ignore[index]
    full = json.loads(await store.get_blob(result.blob))
    assert full == {"report": "x" * 100_000}


async def test_model_outages_are_retried_and_recorded_as_interruptions(
    store: SessionStore,
) -> None:
    flaky = script({"content": "answer after two outages", "fail_first": 2})
    report = await run(url_of(store), flaky)
    assert not report.active
    interruptions = await entries(store, EntryKind.INTERRUPTION)
    assert [i.content["attempt"] for i in interruptions] == [1, 2]  # type: ignore[index]
    responses = await entries(store, EntryKind.MODEL_RESPONSE)
    assert len(responses) == 1, "an interrupted request is never used as a response"
    answer = (await store.session("s1")).state.submissions["r1"].answer
    assert answer == "answer after two outages"


async def test_unknown_outcome_of_an_unsafe_tool_is_parked_not_rerun(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "charges.log"
    monkeypatch.setenv("BH_TEST_TOOL_LOG", str(log))
    charge = script(
        {"tool_calls": [{"name": "charge_card", "arguments": {"text": "order 7"}}]},
        {"content": "charged: {last_tool_result}"},
    )
    report = await run(url_of(store), charge)
    assert report.active and list(report.parked) == ["root.r1.r1.c0"]
    assert "not replay-safe and has no query" in report.parked["root.r1.r1.c0"]
    call = (await store.session("s1")).state.tasks["root.r1.r1.c0"]
    assert call.parked is not None
    operation_id = call.parked.operation_id
    assert operation_id == operation_id_of("s1", "root.r1.r1.c0", "call")
    parked = await store.get_operation(operation_id)
    assert parked is not None and parked.status is OperationStatus.UNCERTAIN

    again = await run(url_of(store), charge)  # nothing changed: still parked, not re-run
    assert again.parked and len(log.read_text().splitlines()) == 1

    settled = await store.settle_operation(  # an operator confirms with the payment provider
        OperationResult(
            operation_id=operation_id, session_id="s1", succeeded=True, output={"charged": True}
        ),
        decided_by="ops@example.com",
        decision="the provider shows the charge for this operation id",
    )
    assert settled.status is OperationStatus.SUCCEEDED and settled.decided_by is not None
    done = await run(url_of(store), charge)
    assert not done.active and len(log.read_text().splitlines()) == 1
    call = (await store.session("s1")).state.tasks["root.r1.r1.c0"]
    assert call.result["path"] == "reused"  # type: ignore[index]
    (result,) = await entries(store, EntryKind.TOOL_RESULT)
    assert result.content["output"] == {"charged": True}  # type: ignore[index]


async def run_recorded(store_url: str, model: Script) -> tuple[DriveReport, ScriptedModel]:
    """Run the worker against a scripted model whose received requests the test reads."""
    scripted = ScriptedModel(model, token="t")
    async with serve(scripted.app()) as url:
        settings = WorkerSettings(
            store_url=store_url,
            session_id="s1",
            plugins=(PLUGIN,),
            model=ModelSettings(base_url=f"{url}/v1", api_key=SecretStr("t"), model="m"),
        )
        return await run_worker(settings), scripted


def answered_calls(messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The tool call ids the assistant made, and the ids tool messages answered."""
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return calls, answers


async def test_a_call_that_ends_without_a_result_is_answered_with_an_error(
    store: SessionStore,
) -> None:
    # Issue 6, defect 5: a tool call that fails with anything but ToolFailed used to
    # leave the assistant's tool_call unanswered, and the next request was a 400.
    calls = script(
        {"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}, {"name": "stuck_sandbox"}]},
        {"content": "finished: {last_tool_result}"},
    )
    report, model = await run_recorded(url_of(store), calls)
    assert not report.active
    assert (await store.session("s1")).state.submissions["r1"].status is SubmissionStatus.ANSWERED
    made, answered = answered_calls(model.received[1].body["messages"])
    assert len(made) == 2 and sorted(answered) == sorted(made), "each call answered exactly once"
    results = await entries(store, EntryKind.TOOL_RESULT)
    failed = [r.content for r in results if not r.content["ok"]]  # type: ignore[index]
    assert [f["error"]["code"] for f in failed] == ["sandbox_timeout"]  # type: ignore[index]


async def test_a_cancelled_call_is_answered_with_an_error(store: SessionStore) -> None:
    calls = script({"tool_calls": [{"name": "wait"}]}, {"content": "gave up waiting"})
    worker = asyncio.create_task(run_recorded(url_of(store), calls))

    async def call_running() -> bool:
        task = (await store.session("s1")).state.tasks.get("root.r1.r1.c0")
        return task is not None and task.phase == "execute"

    await assert_eventually(call_running)
    await SessionClient(store).cancel("s1", task_id="root.r1.r1.c0", reason="took too long")
    report, model = await asyncio.wait_for(worker, 20)
    assert not report.active
    made, answered = answered_calls(model.received[1].body["messages"])
    assert made == answered == ["call_0_0"]
    (result,) = await entries(store, EntryKind.TOOL_RESULT)
    assert result.content["ok"] is False and "took too long" in json.dumps(result.content)  # type: ignore[index]
