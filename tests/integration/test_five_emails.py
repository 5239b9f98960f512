"""The worked example end to end in one process, over real HTTP: the scripted model asks
for the batch tool, five notices go out once each, the model summarises."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from brain.model.scripted import scripted_app
from brain.worker import run_worker
from contracts import EntryKind, SubmissionStatus
from examples.emails import scenario
from examples.emails.client import EmailClient
from examples.emails.service import email_app
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve
from tests.support.kernel import task_history


@dataclass
class World:
    store_url: str
    model_url: str
    email_url: str
    email: EmailClient


@pytest.fixture
async def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    async with (
        serve(email_app(token="mail-token")) as email_url,
        serve(scripted_app(scenario.script(), token="model-token")) as model_url,
    ):
        monkeypatch.setenv("BH_EMAIL_SERVICE_URL", email_url)
        monkeypatch.setenv("BH_EMAIL_SERVICE_TOKEN", "mail-token")
        async with EmailClient(email_url, "mail-token") as email:
            yield World(f"sqlite:///{tmp_path}/store.db", model_url, email_url, email)


async def test_five_notices_are_sent_once_and_summarised(world: World) -> None:
    store = await open_store(world.store_url)
    await SessionClient(store).submit("s1", "req-1", {"text": scenario.REQUEST})
    settings = scenario.worker_settings(
        world.store_url, "s1", model_url=world.model_url, model_token="model-token"
    )
    report = await run_worker(settings)
    assert not report.active and not report.blocked

    session = await store.session("s1")
    submission = session.state.submissions["req-1"]
    assert submission.status is SubmissionStatus.ANSWERED
    assert "Batch summary" in str(submission.answer)
    ledger = await world.email.ledger()
    assert sorted(m.to for m in ledger.messages) == sorted(scenario.recipients())
    assert set(ledger.requests.values()) == {1}, "one request per operation id"
    batch = session.state.tasks["root.req-1.r1.c0.run"]
    receipts = batch.result["receipts"]  # type: ignore[index]
    assert [r["to"] for r in receipts] == scenario.recipients(), "sent in order"
    assert {r["path"] for r in receipts} == {"executed"}
    tool_results = [e for e in await session.entries() if e.kind is EntryKind.TOOL_RESULT]
    assert len(tool_results) == 1 and tool_results[0].content["ok"] is True  # type: ignore[index]
    assert len(session.state.applied_operations) == 6, "five notices and the tool call"
    await store.close()


async def test_a_dropped_response_is_verified_by_query_not_resent(world: World) -> None:
    store = await open_store(world.store_url)
    await world.email.set_faults(drop_responses=1, hold_seconds=3.0)
    await SessionClient(store).submit("s1", "req-1", {"text": scenario.REQUEST})
    settings = scenario.worker_settings(
        world.store_url, "s1", model_url=world.model_url, model_token="model-token"
    )
    await run_worker(settings)
    session = await store.session("s1")
    batch = session.state.tasks["root.req-1.r1.c0.run"]
    paths = [r["path"] for r in batch.result["receipts"]]  # type: ignore[index]
    assert paths == ["verified", "executed", "executed", "executed", "executed"]
    ledger = await world.email.ledger()
    assert len(ledger.messages) == 5 and set(ledger.requests.values()) == {1}
    await store.close()


async def test_notices_go_out_concurrency_at_a_time(world: World) -> None:
    batch_call = scenario.script().turns[0].tool_calls[0]
    arguments = {**batch_call.arguments, "concurrency": 3}  # type: ignore[dict-item]
    script = scenario.script().model_copy(
        update={
            "turns": (
                scenario.script()
                .turns[0]
                .model_copy(
                    update={"tool_calls": (batch_call.model_copy(update={"arguments": arguments}),)}
                ),
                scenario.script().turns[1],
            )
        }
    )
    store = await open_store(world.store_url)
    await SessionClient(store).submit("s1", "req-1", {"text": scenario.REQUEST})
    async with serve(scripted_app(script, token="model-token")) as model_url:
        settings = scenario.worker_settings(
            world.store_url, "s1", model_url=model_url, model_token="model-token"
        )
        await run_worker(settings)
    history = await task_history(store, "s1", "root.req-1.r1.c0.run")
    waits = [t.wait.tasks for t in history if t.wait is not None]
    assert [len(batch) for batch in waits] == [3, 2], "two waves: three notices, then two"
    ledger = await world.email.ledger()
    assert len(ledger.messages) == 5 and set(ledger.requests.values()) == {1}
    await store.close()


async def test_a_repeated_recipient_gets_one_email_and_is_reported(world: World) -> None:
    # Issue 6, defect 4: two notices used to share one operation id; the second
    # application was refused, crashed the drive, and cancelled its siblings mid-send.
    batch_call = scenario.script().turns[0].tool_calls[0]
    given: dict[str, object] = dict(batch_call.arguments)  # type: ignore[arg-type]
    recipients = scenario.recipients()
    given["recipients"] = [recipients[0], recipients[1], recipients[0], *recipients[2:]]
    given["concurrency"] = 4
    turn = (
        scenario.script()
        .turns[0]
        .model_copy(update={"tool_calls": (batch_call.model_copy(update={"arguments": given}),)})
    )
    script = scenario.script().model_copy(update={"turns": (turn, scenario.script().turns[1])})
    store = await open_store(world.store_url)
    await SessionClient(store).submit("s1", "req-1", {"text": scenario.REQUEST})
    async with serve(scripted_app(script, token="model-token")) as model_url:
        settings = scenario.worker_settings(
            world.store_url, "s1", model_url=model_url, model_token="model-token"
        )
        report = await run_worker(settings)
    session = await store.session("s1")
    assert not report.active
    assert session.state.submissions["req-1"].status is SubmissionStatus.ANSWERED
    summary = session.state.tasks["root.req-1.r1.c0.run"].result
    assert summary["sent"] == 5 and summary["failed"] == 0  # type: ignore[index]
    assert summary["duplicates"] == [recipients[0]]  # type: ignore[index]
    ledger = await world.email.ledger()
    assert sorted(m.to for m in ledger.messages) == sorted(recipients)
    assert set(ledger.requests.values()) == {1}
    await store.close()
