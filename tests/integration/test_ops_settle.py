"""Operators settle an ``uncertain`` operation (issue 13, defect 13): ``bh ops settle`` and
``POST /v1/operations/{id}/settle`` over real HTTP, a SQLite store, both APIs.

The decision is recorded by the store with who decided (the token's name) and why; only
an ``uncertain`` operation can be settled (others: 409); the waiting task is woken (the
result event the scheduler turns into a wake); the decision shows in ``bh ops get``,
in the session's view (``bh show``) and in its event stream.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from bh import ops_commands, session_commands
from contracts import Operation, OperationStatus
from contracts.tool import ResultEvent
from hands.api.app import create_app as hands_app
from hands.executor import Executor
from hands.sandbox.process import ProcessSandbox
from session_api.app import create_app as session_app
from session_api.describe import commit_event
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve
from webapi.auth import Grant

pytestmark = pytest.mark.sqlite

ALICE = "oncall-alice-0123456789abcdef"
READER = "dashboard-0123456789abcdef"
GRANTS = (
    Grant(name="oncall-alice", token=SecretStr(ALICE), access="operate"),
    Grant(name="dashboard", token=SecretStr(READER), access="read"),
)


@dataclass
class Scene:
    store: SessionStore
    hands: str
    sessions: str
    events: list[ResultEvent]

    def http(self, token: str = ALICE) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.hands, headers={"Authorization": f"Bearer {token}"})


async def uncertain(store: SessionStore, operation_id: str) -> None:
    record = await store.create_operation(
        Operation(operation_id=operation_id, session_id="s1", task_id="t1", tool="charge", args={})
    )
    record = await store.transition_operation(
        record, OperationStatus.RUNNING, executor="hands-dead", attempts=1
    )
    await store.transition_operation(record, OperationStatus.UNCERTAIN, reason="executor died")


@asynccontextmanager
async def open_scene(tmp_path: Path) -> AsyncIterator[Scene]:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    await SessionClient(store).submit("s1", "r1", "charge the card")
    for operation_id in ("op-1", "op-2", "op-3"):
        await uncertain(store, operation_id)
    events: list[ResultEvent] = []

    async def publish(event: ResultEvent) -> None:
        events.append(event)

    sandbox = ProcessSandbox(tmp_path / "runs")
    executor = Executor(store=store, sandbox=sandbox, publish=publish, executor_id="settle")
    hands = hands_app(store=store, executor=executor, sandbox=sandbox, bus=None, tokens=GRANTS)
    sessions = session_app(store=store, wakes=None, tokens=GRANTS)
    try:
        async with serve(hands) as hands_url, serve(sessions) as sessions_url:
            yield Scene(store, hands_url, sessions_url, events)
    finally:
        await store.close()


@pytest.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    async with open_scene(tmp_path) as opened:
        yield opened


async def test_settling_records_who_and_why_and_wakes_the_session(scene: Scene) -> None:
    body = {
        "outcome": "succeeded",
        "output": {"charged": True},
        "reason": "the provider shows the charge for this operation id",
    }
    async with scene.http() as http:
        response = await http.post("/v1/operations/op-1/settle", json=body)
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["status"] == "succeeded"
    assert view["decided_by"] == "oncall-alice"
    assert view["decision"] == body["reason"]
    assert view["result"]["succeeded"] is True and view["result"]["output"] == {"charged": True}
    assert view["result"]["path"] == "settled"
    # The store holds it; the session is woken by the result event (the scheduler's wake).
    record = await scene.store.get_operation("op-1")
    assert record is not None and record.decided_by == "oncall-alice"
    assert [(e.operation_id, e.session_id, e.succeeded) for e in scene.events] == [
        ("op-1", "s1", True)
    ]
    # The session's view and its event stream say who decided what.
    async with httpx.AsyncClient(
        base_url=scene.sessions, headers={"Authorization": f"Bearer {READER}"}
    ) as sessions:
        session = (await sessions.get("/v1/sessions/s1")).json()
    (op,) = [op for op in session["operations"] if op["operation_id"] == "op-1"]
    assert op["decided_by"] == "oncall-alice" and op["decision"] == body["reason"]
    decision = session["decisions"]["op-1"]
    assert decision["outcome"] == "succeeded" and decision["decided_by"] == "oncall-alice"
    handle = await scene.store.session("s1")
    (last,) = await scene.store.commits("s1", after=handle.seq - 1, limit=1)
    event = commit_event(last)
    assert event.decisions["op-1"].decided_by == "oncall-alice"
    assert event.decisions["op-1"].decision == body["reason"]


async def test_only_an_uncertain_operation_can_be_settled(scene: Scene) -> None:
    failed = {"outcome": "failed", "reason": "the provider has no such charge"}
    async with scene.http() as http:
        first = await http.post("/v1/operations/op-1/settle", json=failed)
        assert first.status_code == 200 and first.json()["status"] == "failed"
        assert first.json()["result"]["error"]["message"].endswith(failed["reason"])
        again = await http.post(
            "/v1/operations/op-1/settle", json={"outcome": "succeeded", "reason": "changed mind"}
        )
        assert again.status_code == 409, again.text
        error = again.json()["error"]
        assert "only an uncertain operation" in error["message"] and "failed" in error["message"]
        missing = await http.post("/v1/operations/nope/settle", json=failed)
        assert missing.status_code == 404
        bad = await http.post("/v1/operations/op-2/settle", json={"outcome": "maybe"})
        assert bad.status_code == 422
    async with scene.http(READER) as reader:
        refused = await reader.post("/v1/operations/op-2/settle", json=failed)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    still = await scene.store.get_operation("op-2")
    assert still is not None and still.status is OperationStatus.UNCERTAIN


async def test_bh_ops_settle_and_what_bh_ops_get_and_bh_show_say(scene: Scene) -> None:
    runner = CliRunner()
    env = {"BH_HANDS_API_URL": scene.hands, "BH_HANDS_API_TOKEN": ALICE, "COLUMNS": "200"}

    def bh(app: Any, *args: str, **extra: str) -> Any:
        return runner.invoke(app, list(args), env={**os.environ, **env, **extra})

    settled = await _in_thread(
        bh,
        ops_commands.app,
        "settle",
        "op-2",
        "--outcome",
        "succeeded",
        "--output",
        '{"charged": true}',
        "--reason",
        "confirmed with the provider",
    )
    assert settled.exit_code == 0, settled.output
    assert "oncall-alice" in settled.output and "confirmed with the provider" in settled.output
    got = await _in_thread(bh, ops_commands.app, "get", "op-2")
    assert got.exit_code == 0 and "oncall-alice" in got.output
    assert "confirmed with the provider" in got.output
    bad = await _in_thread(
        bh, ops_commands.app, "settle", "op-2", "--outcome", "failed", "--reason", "x"
    )
    assert bad.exit_code == 2 and "only an uncertain operation" in bad.output
    not_json = await _in_thread(
        bh,
        ops_commands.app,
        "settle",
        "op-3",
        "--outcome",
        "succeeded",
        "--output",
        "{no",
        "--reason",
        "x",
    )
    assert not_json.exit_code == 2 and "--output" in not_json.output
    shown = await _in_thread(
        bh,
        session_commands.app,
        "show",
        "s1",
        BH_SESSION_API_URL=scene.sessions,
        BH_SESSION_API_TOKEN=READER,
    )
    assert shown.exit_code == 0, shown.output
    assert "oncall-alice" in shown.output and "confirmed with the provider" in shown.output


async def _in_thread(call: Any, *args: Any, **kwargs: Any) -> Any:
    """The CLI runs its own event loop: run it off this test's loop (which serves)."""
    import asyncio

    return await asyncio.to_thread(call, *args, **kwargs)
