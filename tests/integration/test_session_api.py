"""The Session API over real HTTP: uvicorn on a free loopback port, a SQLite store, the
embedded kernel driving sessions, and a recording wake queue (our own boundary).

The event stream is read as raw Server-Sent Events here, and through the client's
reconnecting ``follow``; the CLI is run against the same server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from rich.console import Console
from typer.testing import CliRunner

from bh import session_commands
from bh.session_client import (
    EventParser,
    SessionApiClient,
    StreamItem,
    merge,
)
from brain.context import PhaseContext
from brain.outcome import Done, Effects, TaskSpec, Wait
from brain.registry import Registry
from brain.tools import ToolSpec
from contracts import (
    CONTROL_DOCUMENT,
    Commit,
    DocumentPatch,
    InvalidInput,
    NotFound,
    Question,
    QuestionKind,
    StoreUnavailable,
    SubmissionStatus,
)
from contracts.errors import Unauthorized
from session_api.app import create_app, stop_streams
from session_api.stream import SessionStream, StreamSettings
from session_api.views import CommitEvent, SessionView
from tests.support.eventually import assert_eventually
from tests.support.http_server import free_port, serve
from tests.support.kernel import Kernel, kernel, kind, mail_kind
from tests.support.processes import ROOT
from webapi.auth import Grant

pytestmark = pytest.mark.sqlite

TOKEN = "session-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAST = StreamSettings(
    poll=timedelta(milliseconds=10),
    idle_poll=timedelta(milliseconds=50),
    heartbeat=timedelta(seconds=15),
    max_duration=timedelta(seconds=30),
)


@dataclass
class RecordingWakes:
    """The wake queue, as a list of ``(session_id, reason)``; ``fail`` makes it raise."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: bool = False

    async def check(self) -> None:
        if self.fail:
            raise StoreUnavailable("redis is down")

    async def wake(self, session_id: str, *, reason: str, after: timedelta | None = None) -> None:
        if self.fail:
            raise StoreUnavailable("redis is down")
        self.calls.append((session_id, reason))


@dataclass
class Api:
    url: str
    http: httpx.AsyncClient
    k: Kernel
    wakes: RecordingWakes
    app: Any

    def client(self, token: str = TOKEN) -> SessionApiClient:
        return SessionApiClient(self.url, token)

    async def submit(self, request_id: str, input: Any = "hi", session: str = "s1") -> Any:
        body = {"request_id": request_id, "input": input}
        response = await self.http.post(f"/v1/sessions/{session}/submissions", json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()


COLOUR = Question(id="q1", prompt="Which?", kind=QuestionKind.CHOICE, choices=("red", "blue"))


def registry() -> Registry:
    """``ask`` asks ``COLOUR`` and answers with the reply (``ask_briefly``: within 5 ms
    of its Brain's clock, then the deadline settles it without a value); ``calc`` doubles its input;
    ``parent`` spawns a ``calc`` child and waits for it; ``mail`` sends one email through
    the ``send`` tool."""

    async def double(ctx: PhaseContext) -> Done:
        return Done(result=2 * int(ctx.input["n"]))

    async def spawn(ctx: PhaseContext) -> Wait:
        child = TaskSpec(id=f"{ctx.task.id}.child", kind="calc", input={"n": 21})
        return Wait(tasks=(child.id,), next_phase="finish", effects=Effects(spawn=(child,)))

    async def finish(ctx: PhaseContext) -> Done:
        return Done(result="children done")

    async def ask(ctx: PhaseContext) -> Wait:
        return Wait(question=COLOUR, next_phase="told")

    async def told(ctx: PhaseContext) -> Done:
        return Done(result=ctx.answer(COLOUR.id).value)

    async def ask_briefly(ctx: PhaseContext) -> Wait:
        brief = COLOUR.model_copy(update={"deadline": ctx.now() + timedelta(milliseconds=5)})
        return Wait(question=brief, next_phase="told")

    kinds = Registry()
    kinds.add(kind("ask", {"start": ask, "told": told}))
    kinds.add(kind("ask_briefly", {"start": ask_briefly, "told": told}))
    kinds.add(kind("calc", {"start": double}))
    kinds.add(kind("parent", {"start": spawn, "finish": finish}))
    kinds.add(mail_kind())
    return kinds


@asynccontextmanager
async def open_api(
    tmp_path: Path, streams: StreamSettings = FAST, **options: Any
) -> AsyncIterator[Api]:
    """The API over the kernel's store; ``options``: more of ``create_app``'s."""
    wakes = RecordingWakes()
    async with kernel(tmp_path, registry()) as k:

        async def send(args: dict[str, Any], operation_id: str) -> Any:
            return {"sent_to": args["to"]}

        k.tools.register(ToolSpec(name="send"), send)
        app = create_app(
            store=k.store, wakes=wakes, token=SecretStr(TOKEN), streams=streams, **options
        )
        async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            yield Api(url, http, k, wakes, app)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as opened:
        yield opened


class Events:
    """A raw event stream: ``next()`` returns ``(event, data, id)``; comments are kept
    in ``comments``."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.parser = EventParser()
        self.comments: list[str] = []

    async def next(self, within: float = 5.0) -> tuple[str, Any, int | None]:
        async with asyncio.timeout(within):
            async for line in self.lines:
                if line.startswith(":"):
                    self.comments.append(line)
                parsed = self.parser.feed(line)
                if parsed is not None:
                    name, data, id = parsed
                    return name, json.loads(data), None if id is None else int(id)
        raise EOFError("the stream ended")

    async def ended(self, within: float = 5.0) -> bool:
        try:
            await self.next(within)
        except EOFError:
            return True
        return False


@asynccontextmanager
async def events(api: Api, session: str = "s1", **headers: str) -> AsyncIterator[Events]:
    wanted = {key.replace("_", "-"): value for key, value in headers.items()}
    path = f"/v1/sessions/{session}/events"
    async with api.http.stream("GET", path, headers=wanted) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Events(response)


ROUTES = [
    ("GET", "/v1/sessions", None),
    ("GET", "/v1/sessions/s1", None),
    ("GET", "/v1/sessions/s1/events", None),
    ("GET", "/v1/questions", None),
    ("POST", "/v1/sessions/s1/submissions", {"request_id": "r1", "input": "hi"}),
    ("POST", "/v1/sessions/s1/cancel", {"request_id": "r1"}),
    ("PUT", "/v1/sessions/s1/input-policy", {"policy": "reject"}),
    ("PUT", "/v1/sessions/s1/budget", {"budget": {"tokens": 10}}),
    ("POST", "/v1/sessions/s1/inputs", {"request_id": "a1", "question_id": "q1", "value": "x"}),
    ("GET", "/openapi.json", None),
    ("GET", "/v1/no-such-route", None),
    ("POST", "/v1/sessions/s1/submissions", "{not json"),
]


async def test_every_route_but_healthz_needs_the_token(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        health = await anonymous.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        for method, path, body in ROUTES:
            for headers in (
                {},
                {"Authorization": "Bearer wrong-token-0123456789"},
                {"Authorization": f"Basic {TOKEN}"},
            ):
                kwargs: dict[str, Any] = {"headers": headers}
                if isinstance(body, str):
                    kwargs["content"] = body
                elif body is not None:
                    kwargs["json"] = body
                response = await anonymous.request(method, path, **kwargs)
                assert response.status_code == 401, (method, path, headers)
                assert response.json()["error"]["code"] == "unauthorized"
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert TOKEN not in response.text
    assert (await api.k.store.session("s1")).seq == 0 and api.wakes.calls == []
    async with api.client("wrong-token-0123456789") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.sessions()


async def test_a_request_id_is_accepted_once_and_wakes_the_session(api: Api) -> None:
    response = await api.http.post(
        "/v1/sessions/s1/submissions", json={"request_id": "r1", "input": {"text": "hello"}}
    )
    assert response.status_code == 201, response.text
    first = response.json()
    assert first["request_id"] == "r1" and first["status"] == "accepted"
    assert first["input"] == {"text": "hello"} and first["conversation_id"] == "main"
    assert api.wakes.calls == [("s1", "submission")]
    handle = await api.k.store.session("s1")
    seq = handle.seq

    again = await api.http.post(
        "/v1/sessions/s1/submissions", json={"request_id": "r1", "input": "something else"}
    )
    assert again.status_code == 200 and again.json() == first
    handle = await api.k.store.session("s1")
    assert handle.seq == seq and list(handle.state.submissions) == ["r1"]
    assert set(api.wakes.calls) == {("s1", "submission")}  # a repeat may wake again

    async with api.client() as client:
        repeated = await client.submit("s1", "third", request_id="r1")
        assert not repeated.created and repeated.submission.input == {"text": "hello"}
        fresh = await client.submit("s1", "hi", request_id="r2")
        assert fresh.created and fresh.submission.status is SubmissionStatus.ACCEPTED


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "submissions", {"request_id": "-bad", "input": "x"}, "request_id"),
        ("POST", "submissions", {"request_id": "a b", "input": "x"}, "request_id"),
        ("POST", "submissions", {"input": "x"}, "request_id"),
        ("POST", "submissions", {"request_id": "r1"}, "input"),
        ("POST", "submissions", {"request_id": "r1", "input": 5}, "input"),
        ("POST", "submissions", {"request_id": "r1", "input": {"txt": "x"}}, "input"),
        ("POST", "submissions", {"request_id": "r1", "input": {"text": 5}}, "input.text"),
        (
            "POST",
            "submissions",
            {"request_id": "r1", "input": {"task": {"kind": "no such!"}}},
            "input.task.kind",
        ),
        (
            "POST",
            "submissions",
            {"request_id": "r1", "input": "x", "conversation_id": ""},
            "conversation_id",
        ),
        ("POST", "submissions", {"request_id": "r1", "input": "x", "extra": 1}, "extra"),
        ("POST", "submissions", "{not json", "(body)"),
        ("POST", "cancel", {}, "request_id"),
        ("POST", "cancel", {"request_id": "r1", "task_id": "t1"}, "task_id"),
        ("POST", "cancel", {"task_id": "bad id"}, "task_id"),
        ("POST", "cancel", {"request_id": "r1", "reason": ""}, "reason"),
        ("GET", "?entries=-1", None, "entries"),
        ("GET", "/events?entries=9999", None, "entries"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    api: Api, method: str, path: str, body: Any, field: str
) -> None:
    kwargs: dict[str, Any] = {}
    if isinstance(body, str):
        kwargs = {"content": body, "headers": {"Content-Type": "application/json"}}
    elif body is not None:
        kwargs = {"json": body}
    url = f"/v1/sessions/s1{'/' if path[0].isalpha() else ''}{path}"
    response = await api.http.request(method, url, **kwargs)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["details"]["field"] == field, error
    assert field in error["message"] or field == "(body)"
    assert (await api.k.store.session("s1")).seq == 0 and api.wakes.calls == []


async def test_bad_ids_in_the_path_and_headers_are_422_too(api: Api) -> None:
    bad_session = await api.http.get("/v1/sessions/-bad")
    assert bad_session.status_code == 422
    assert bad_session.json()["error"]["details"] == {
        "field": "session_id",
        "location": "path",
        "problems": 1,
    }
    bad_resume = await api.http.get("/v1/sessions/s1/events", headers={"Last-Event-ID": "x"})
    assert bad_resume.status_code == 422
    assert bad_resume.json()["error"]["details"]["field"] == "last-event-id"
    async with api.client() as client:
        with pytest.raises(InvalidInput) as refused:
            await client.submit("s1", {"task": {}}, request_id="r1")
        assert refused.value.details["field"] == "input.task.kind"


async def test_the_view_shows_tasks_operations_entries_and_outcomes(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "parent"}})
    await api.submit("r2", {"task": {"kind": "mail"}})
    await api.submit("r3", {"task": {"kind": "mystery", "version": 2}})
    await api.k.run("s1")
    await _report_blocked(api, "root.r3", "no handler for mystery@2; this Brain runs no version")

    response = await api.http.get("/v1/sessions/s1", params={"entries": 5})
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["session_id"] == "s1" and view["seq"] == (await api.k.store.session("s1")).seq
    submissions = {s["request_id"]: s for s in view["submissions"]}
    assert submissions["r1"]["status"] == "answered"
    assert submissions["r1"]["answer"] == "children done"
    assert submissions["r2"]["status"] == "answered" and submissions["r2"]["answer"] == "sent"
    assert submissions["r3"]["status"] == "processing"

    tasks = {t["id"]: t for t in view["tasks"]}
    child = tasks["root.r1.child"]
    assert child["parent_id"] == "root.r1" and child["kind"] == "calc"
    assert (child["status"], child["outcome"], child["result"]) == ("terminal", "succeeded", 42)
    assert tasks["root.r1"]["outcome"] == "succeeded"
    blocked = tasks["root.r3"]
    assert blocked["status"] == "pending" and blocked["blocked"].startswith("no handler")
    assert view["blocked"] == [
        {
            "task_id": "root.r3",
            "kind": "mystery",
            "version": 2,
            "reason": "no handler for mystery@2; this Brain runs no version",
        }
    ]

    (operation,) = view["operations"]
    assert operation["tool"] == "send" and operation["task_id"] == "root.r2"
    # Run inline by the Brain (not a Hands result entering the session): not "applied".
    assert operation["status"] == "succeeded" and operation["applied"] is False
    assert operation["result"]["succeeded"] is True and view["operations_total"] == 1
    assert len(view["entries"]) <= 5 and view["entry_count"] >= len(view["entries"])
    assert [e["index"] for e in view["entries"]] == list(
        range(view["entry_count"] - len(view["entries"]), view["entry_count"])
    )

    missing = await api.http.get("/v1/sessions/nobody")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_active_sessions_are_listed_with_a_summary(api: Api) -> None:
    await api.submit("r1", session="s1")
    await api.submit("r1", session="s2")
    await api.submit("r2", session="s2")
    listed = (await api.http.get("/v1/sessions")).json()
    summaries = {s["session_id"]: s for s in listed["sessions"]}
    assert set(summaries) == {"s1", "s2"} and listed["truncated"] is False
    assert summaries["s2"]["open_submissions"] == 2 and summaries["s2"]["seq"] == 2
    assert listed["sessions"][0]["session_id"] == "s2"  # newest first
    one = (await api.http.get("/v1/sessions?limit=1")).json()
    assert len(one["sessions"]) == 1 and one["truncated"] is True
    too_many = await api.http.get("/v1/sessions?limit=201")
    assert too_many.status_code == 422 and too_many.json()["error"]["details"]["field"] == "limit"


async def test_active_sessions_are_paged_in_id_order_with_after(api: Api) -> None:
    """Each page holds the next ``limit`` active ids (shown newest first); ``next_after``
    goes on from there, so every active session is listed once whatever their number;
    a finished session whose marker is still in the index is not listed."""
    for session in ("a1", "a2", "a3", "a4", "a5"):
        await api.submit("r1", session=session)
    calc = {"task": {"kind": "calc", "input": {"n": 2}}}
    await api.submit("r1", calc, session="a0")
    await api.k.run("a0")  # finished; its marker stays until a sweep
    await api.k.store.index.mark("a0")
    seen: list[str] = []
    after = None
    for _ in range(4):
        query = "/v1/sessions?limit=2" + (f"&after={after}" if after else "")
        page = (await api.http.get(query)).json()
        seen += [s["session_id"] for s in page["sessions"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == ["a2", "a1", "a4", "a3", "a5"]  # pages by id, each newest first
    assert page["truncated"] is False


async def test_events_start_with_the_view_and_resume_after_the_last_id(api: Api) -> None:
    await api.submit("r1")
    async with events(api) as stream:
        name, view, id = await stream.next()
        assert (name, id, view["seq"]) == ("view", 1, 1)
        assert [s["request_id"] for s in view["submissions"]] == ["r1"]
        await api.submit("r2", {"text": "second"})
        name, commit, id = await stream.next()
        assert (name, id, commit["seq"]) == ("commit", 2, 2)
        assert [s["request_id"] for s in commit["submissions"]] == ["r2"]
        assert [(e["kind"], e["text"]) for e in commit["entries"]] == [("user_input", "second")]
        assert commit["writer"] and commit["claim"] is False

    await api.submit("r3")  # while nobody listens
    async with events(api, last_event_id="2") as stream:
        name, commit, id = await stream.next()
        assert (name, id) == ("commit", 3)  # no view: only what came after seq 2
        await api.submit("r4")
        name, commit, id = await stream.next()
        assert (name, id, commit["submissions"][0]["request_id"]) == ("commit", 4, "r4")

    async with events(api, last_event_id="4") as stream:
        await api.k.run("s1")  # the kernel's commits: a claim, then the tasks it decides
        name, claim, id = await stream.next()
        assert (name, id, claim["claim"]) == ("commit", 5, True) and claim["holder"]
        name, decided, id = await stream.next()
        assert id == 6 and decided["tasks"] and decided["tasks"][0]["id"].startswith("root.")

    # A resume point the log does not have (from another store?) gets a fresh view.
    async with events(api, last_event_id="999") as stream:
        name, view, id = await stream.next()
        assert name == "view" and id == view["seq"] >= 6


async def test_a_client_far_behind_gets_a_fresh_view(tmp_path: Path) -> None:
    async with open_api(tmp_path, FAST.model_copy(update={"catch_up": 2})) as api:
        for n in range(4):
            await api.submit(f"r{n}")
        async with events(api, last_event_id="2") as stream:
            name, _, id = await stream.next()
            assert (name, id) == ("commit", 3)
        async with events(api, last_event_id="1") as stream:
            name, view, id = await stream.next()
            assert (name, id) == ("view", 4) and len(view["submissions"]) == 4


async def test_streams_keep_alive_and_end_by_themselves(tmp_path: Path) -> None:
    short = FAST.model_copy(
        update={"heartbeat": timedelta(milliseconds=100), "max_duration": timedelta(seconds=1)}
    )
    async with open_api(tmp_path, short) as api, events(api, session="quiet") as stream:
        name, view, id = await stream.next()
        assert (name, id, view["seq"]) == ("view", 0, 0)  # a session may be watched early
        assert await stream.ended(within=5)
        assert ": keepalive" in stream.comments
        assert stream.comments[-1].startswith(": stream ends")


async def test_stopping_the_server_ends_open_streams(api: Api) -> None:
    async with events(api) as stream:
        await stream.next()
        stop_streams(api.app)
        assert await stream.ended(within=5)


async def test_follow_reconnects_and_yields_each_commit_once(tmp_path: Path) -> None:
    short = FAST.model_copy(update={"max_duration": timedelta(milliseconds=300)})
    async with open_api(tmp_path, short) as api, api.client() as client:
        await api.submit("r1")
        seen: list[StreamItem] = []
        async with aclosing(client.follow("s1", retry=0.05)) as items:
            async for item in items:
                seen.append(item)
                if item.seq == 4:
                    break
                await asyncio.sleep(0.4)  # outlive the stream: the next item is after a reconnect
                await api.submit(f"r{item.seq + 1}")
    assert [type(item) for item in seen] == [SessionView, CommitEvent, CommitEvent, CommitEvent]
    assert [item.seq for item in seen] == [1, 2, 3, 4]
    view = seen[0]
    assert isinstance(view, SessionView)
    for item in seen[1:]:
        assert isinstance(item, CommitEvent)
        view = merge(view, item)
    assert [s.request_id for s in view.submissions] == ["r1", "r2", "r3", "r4"]
    assert view.entry_count == 4 and [e.index for e in view.entries] == [0, 1, 2, 3]


OTHER = "other-token-0123456789"


async def test_open_event_streams_are_capped_per_token_and_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: nothing bounded the event streams one token (or everyone) held open,
    each polling the store. A stream's slot is reserved before it opens, so concurrent
    requests cannot all pass the check (invariant 20); over a cap the answer is 429
    ``too_many_requests`` with ``Retry-After``; a slot is released when its stream ends
    however it ends — the client gone, or its opening failed."""
    capped = FAST.model_copy(update={"max_open": 3, "max_open_per_token": 2})
    other = Grant(name="other", token=SecretStr(OTHER), access="read")
    async with open_api(tmp_path, capped, tokens=(other,)) as api:
        stranger = httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {OTHER}"})
        async with stranger, events(api) as first, events(api) as second:
            await first.next()
            await second.next()
            refused = await api.http.get("/v1/sessions/s1/events")
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "too_many_requests"
            assert int(refused.headers["retry-after"]) >= 1
            assert "default" in refused.json()["error"]["message"]  # the token's own cap
            async with stranger.stream("GET", "/v1/sessions/s1/events") as third:
                assert third.status_code == 200
                over = await stranger.get("/v1/sessions/s1/events")
                assert over.status_code == 429 and "this server" in over.json()["error"]["message"]
        await assert_eventually(lambda: _streams_open(api, 0), within=10)

        async def broken(self: SessionStream, last_event_id: int | None) -> None:
            raise StoreUnavailable("the store is away (test)")

        monkeypatch.setattr(SessionStream, "open", broken)
        for _ in range(3):  # more than the token's cap: each failed opening gave its slot back
            failed = await api.http.get("/v1/sessions/s1/events")
            assert failed.status_code == 503
        assert await _streams_open(api, 0)
        monkeypatch.undo()
        async with events(api) as again:
            assert (await again.next())[0] == "view"


async def _streams_open(api: Api, count: int) -> bool:
    return bool(api.app.state.context.slots.open == count)


async def test_cancel_records_the_request_and_wakes_the_session(api: Api) -> None:
    await api.submit("r1")
    api.wakes.calls.clear()
    body = {"request_id": "r1", "reason": "changed my mind"}
    response = await api.http.post("/v1/sessions/s1/cancel", json=body)
    assert response.status_code == 202, response.text
    assert response.json()["recorded"] is True and response.json()["status"] == "accepted"
    handle = await api.k.store.session("s1")
    control = handle.state.documents[CONTROL_DOCUMENT].body
    assert control["cancel_requests"] == {"r1": "changed my mind"}
    assert api.wakes.calls == [("s1", "cancel")]
    view = (await api.http.get("/v1/sessions/s1")).json()
    assert view["cancel_requests"] == {"r1": "changed my mind"}

    again = await api.http.post("/v1/sessions/s1/cancel", json=body)
    assert again.status_code == 202 and again.json()["recorded"] is False
    assert (await api.k.store.session("s1")).seq == handle.seq  # nothing written twice

    await api.k.run("s1")
    settled = await api.http.post("/v1/sessions/s1/cancel", json=body)
    assert settled.status_code == 200
    assert settled.json()["recorded"] is False and settled.json()["status"] == "cancelled"

    for target in ({"request_id": "r9"}, {"task_id": "t9"}):
        missing = await api.http.post("/v1/sessions/s1/cancel", json=target)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_a_task_is_cancelled_by_id(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "mystery"}})
    await api.k.run("s1")  # creates root.r1, which nobody here can run
    async with api.client() as client:
        accepted = await client.cancel("s1", task_id="root.r1", reason="not needed")
        assert accepted.recorded and accepted.status == "pending"
        with pytest.raises(NotFound):
            await client.cancel("s1", task_id="root.r9")
    handle = await api.k.store.session("s1")
    assert handle.state.documents[CONTROL_DOCUMENT].body["cancel_tasks"] == {
        "root.r1": "not needed"
    }


async def test_a_failed_wake_does_not_fail_accepted_input(api: Api) -> None:
    api.wakes.fail = True
    response = await api.http.post(
        "/v1/sessions/s1/submissions", json={"request_id": "r1", "input": "x"}
    )
    assert response.status_code == 201
    assert (await api.k.store.session("s1")).state.submissions["r1"].status == "accepted"


async def test_the_openapi_document_lists_every_route(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    paths = document["paths"]
    assert set(paths) >= {
        "/healthz",
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/submissions",
        "/v1/sessions/{session_id}/cancel",
        "/v1/sessions/{session_id}/inputs",
        "/v1/sessions/{session_id}/input-policy",
        "/v1/sessions/{session_id}/budget",
        "/v1/questions",
        "/v1/sessions/{session_id}/events",
    }
    assert paths["/v1/sessions/{session_id}"]["get"]["security"] == [{"HTTPBearer": []}]
    assert (
        "text/event-stream"
        in paths["/v1/sessions/{session_id}/events"]["get"]["responses"]["200"]["content"]
    )
    assert "security" not in paths["/healthz"]["get"]


async def test_the_cli_goes_through_the_api(api: Api) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    runner = CliRunner()

    def cli(*args: str, **extra: str) -> Any:
        return runner.invoke(session_commands.app, list(args), env={**env, **extra})

    task = json.dumps({"task": {"kind": "parent"}})
    submitted = await asyncio.to_thread(
        cli, "submit", "s1", task, "--json-input", "--request-id", "r1"
    )
    assert submitted.exit_code == 0, submitted.output
    assert "r1 submitted to s1 (accepted)" in submitted.output
    repeated = await asyncio.to_thread(cli, "submit", "s1", "other", "--request-id", "r1")
    assert "already submitted" in repeated.output
    generated = await asyncio.to_thread(cli, "submit", "s2", "hello", "--json")
    assert (
        generated.exit_code == 0
        and len(json.loads(generated.output)["submission"]["request_id"]) == 32
    )

    watching = asyncio.create_task(asyncio.to_thread(cli, "watch", "s1", "--until-done"))
    await asyncio.sleep(0.3)  # not needed to pass: lets the watch see the run live, mostly
    await api.k.run("s1")
    watched = await asyncio.wait_for(watching, 15)
    assert watched.exit_code == 0, watched.output
    assert "root.r1.child" in watched.output and "answered" in watched.output

    shown = await asyncio.to_thread(cli, "show", "s1")
    assert shown.exit_code == 0, shown.output
    assert "root.r1" in shown.output and "children done" in shown.output
    listed = await asyncio.to_thread(cli, "sessions")
    assert listed.exit_code == 0 and "s2" in listed.output
    cancelled = await asyncio.to_thread(
        cli, "cancel", "s2", "--request-id", generated_id(generated)
    )
    assert cancelled.exit_code == 0 and "cancellation recorded" in cancelled.output
    missing = await asyncio.to_thread(cli, "show", "nobody")
    assert missing.exit_code == 2 and "not_found" in missing.output
    stranger = await asyncio.to_thread(
        cli, "sessions", BH_SESSION_API_TOKEN="wrong-token-012345678"
    )
    assert stranger.exit_code == 2 and "unauthorized" in stranger.output


def generated_id(result: Any) -> str:
    return str(json.loads(result.output)["submission"]["request_id"])


async def test_a_question_is_answered_once_through_the_api(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "ask"}})
    await api.k.run()
    view = (await api.http.get("/v1/sessions/s1")).json()
    (open_,) = view["questions"]
    assert open_["task_id"] == "root.r1" and open_["question"]["choices"] == ["red", "blue"]
    (asking,) = [task for task in view["tasks"] if task["id"] == "root.r1"]
    assert asking["waiting_for_input"] is True
    listed = (await api.http.get("/v1/sessions")).json()["sessions"]
    assert listed[0]["waiting_for_input"] == 1

    def answer(request_id: str, value: object, question: str = "q1", **more: str) -> Any:
        body = {"request_id": request_id, "question_id": question, "value": value, **more}
        return api.http.post("/v1/sessions/s1/inputs", json=body)

    assert (await answer("a0", "green")).status_code == 422
    assert (await answer("a0", "red", question="q9")).status_code == 404
    api.wakes.calls.clear()
    accepted = await answer("a1", "blue", why="it is calm")
    assert accepted.status_code == 201, accepted.text
    assert api.wakes.calls == [("s1", "answer")]
    assert (await answer("a1", "blue")).status_code == 200, "the same request: the original"
    second = await answer("a2", "red")
    refused = second.json()["error"]
    assert second.status_code == 409 and refused["code"] == "already_answered"
    assert refused["details"]["request_id"] == "a1"
    await api.k.run()
    view = (await api.http.get("/v1/sessions/s1")).json()
    assert view["questions"] == []
    (told,) = [task for task in view["tasks"] if task["id"] == "root.r1"]
    assert told["result"] == "blue"
    assert told["answers"]["q1"]["by"] == "default" and told["answers"]["q1"]["why"] == "it is calm"
    late = await answer("a3", "red")
    assert late.status_code == 409
    assert "already answered by default" in late.json()["error"]["message"]


async def test_an_answer_after_the_deadline_is_409_question_expired(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "ask_briefly"}})
    asked_at = await api.k.store.clock.fresh()
    # a Brain whose clock stands still: none plans after the deadline (busy, or the
    # scheduler is down), so the question is still open in the log
    report = await api.k.runner(clock=lambda: asked_at).drive("s1")
    deadline = report.next_wake_at
    assert deadline is not None

    async def passed() -> bool:
        return api.k.store.clock.now() > deadline

    await assert_eventually(passed, interval=0.002)
    api.wakes.calls.clear()
    body = {"request_id": "a1", "question_id": "q1", "value": "blue"}
    late = await api.http.post("/v1/sessions/s1/inputs", json=body)
    assert late.status_code == 409, late.text
    refused = late.json()["error"]
    assert refused["code"] == "question_expired"
    assert refused["details"] == {
        "question_id": "q1",
        "task_id": "root.r1",
        "deadline": deadline.isoformat(),
        "settled": False,
    }
    assert await api.k.client.get("s1", "a1") is None, "nothing is stored"
    assert api.wakes.calls == [("s1", "deadline")], "a Brain is needed to record the denial"
    await api.k.runner(clock=api.k.store.clock.now).drive("s1")
    api.wakes.calls.clear()
    again = await api.http.post("/v1/sessions/s1/inputs", json={**body, "request_id": "a2"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "question_expired"
    assert again.json()["error"]["details"]["settled"] is True and api.wakes.calls == []
    view = (await api.http.get("/v1/sessions/s1")).json()
    (told,) = [task for task in view["tasks"] if task["id"] == "root.r1"]
    assert told["answers"]["q1"]["by"] == "deadline" and told["result"] is None


async def test_an_answer_is_recorded_as_the_token_s_and_the_name_given_beside_it(
    api: Api,
) -> None:
    await api.submit("r1", {"task": {"kind": "ask"}})
    await api.k.run()

    def answer(request_id: str, by: str) -> Any:
        body = {"request_id": request_id, "question_id": "q1", "value": "red", "by": by}
        return api.http.post("/v1/sessions/s1/inputs", json=body)

    for reserved in ("deadline", "kernel"):
        refused = await answer("a0", reserved)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["details"]["field"] == "by"
        assert "reserved" in refused.json()["error"]["message"]
    assert (await answer("a1", "ops-lead")).status_code == 201
    await api.k.run()
    settled = (await api.k.task("root.r1")).answers["q1"]
    assert (settled.by, settled.claimed_by) == ("default", "ops-lead"), "by: the token's name"


async def test_the_inbox_lists_open_questions_across_sessions(api: Api) -> None:
    for session in ("s1", "s2"):
        await api.submit("r1", {"task": {"kind": "ask"}}, session=session)
        await api.k.run(session)
    inbox = (await api.http.get("/v1/questions")).json()
    assert [(q["session_id"], q["question"]["id"]) for q in inbox["questions"]] == [
        ("s1", "q1"),
        ("s2", "q1"),
    ]
    assert (await api.http.get("/v1/questions", params={"queue": "ops"})).json()["questions"] == []
    await api.k.client.answer("s1", "a1", "q1", "red", by="ann")
    await api.k.run("s1")
    left = (await api.http.get("/v1/questions", params={"queue": "default"})).json()
    assert [q["session_id"] for q in left["questions"]] == ["s2"]
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    listed = await asyncio.to_thread(
        CliRunner().invoke, session_commands.app, ["questions"], env=env
    )
    assert listed.exit_code == 0 and "s2" in listed.output and "Which?" in listed.output


async def test_the_stream_shows_the_question_and_its_answer(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "ask"}})
    async with events(api) as stream:
        _, first, _ = await stream.next()
        current = SessionView.model_validate(first)
        await api.k.run()  # asks
        while not current.questions:
            _, data, _ = await stream.next()
            current = merge(current, CommitEvent.model_validate(data))
        assert current.questions[0].question == COLOUR
        await api.k.client.answer("s1", "a1", "q1", "red", by="ann")
        await api.k.run()  # applies the answer, then finishes
        while current.active:
            _, data, _ = await stream.next()
            current = merge(current, CommitEvent.model_validate(data))
        assert current.questions == []
        (asked,) = [task for task in current.tasks if task.id == "root.r1"]
        assert asked.answers["q1"].by == "ann" and asked.result == "red"


async def test_the_cli_answers_and_approves(api: Api) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    runner = CliRunner()
    await api.submit("r1", {"task": {"kind": "ask"}})
    await api.k.run()
    shown = await asyncio.to_thread(runner.invoke, session_commands.app, ["show", "s1"], env=env)
    assert "waiting for input" in shown.output and "red | blue" in shown.output
    wrong = await asyncio.to_thread(
        runner.invoke, session_commands.app, ["approve", "s1", "q1"], env=env
    )
    assert wrong.exit_code == 2 and "invalid_input" in wrong.output, "a choice, not an approval"
    said = await asyncio.to_thread(
        runner.invoke,
        session_commands.app,
        ["answer", "s1", "q1", "red", "--by", "ann", "--request-id", "a1"],
        env=env,
    )
    assert said.exit_code == 0 and "answer a1 to q1 accepted (accepted)" in said.output
    await api.k.run()
    told = await api.k.task("root.r1")
    assert told.result == "red"
    assert (told.answers["q1"].by, told.answers["q1"].claimed_by) == ("default", "ann")


async def test_messages_while_an_agent_runs_follow_the_policy(api: Api) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    runner = CliRunner()
    await api.submit("r1", "hello")
    put = await api.http.put("/v1/sessions/s1/input-policy", json={"policy": "reject"})
    assert put.status_code == 200 and put.json() == {"policy": "reject"}
    assert (await api.http.get("/v1/sessions/s1")).json()["input_policy"] == "reject"
    refused = await api.submit("r2", "me too")
    assert refused["status"] == "failed" and refused["handling"] == "rejected"
    assert refused["error"]["code"] == "busy"
    said = await asyncio.to_thread(
        runner.invoke,
        session_commands.app,
        ["submit", "s1", "now", "--policy", "enqueue", "--request-id", "r3"],
        env=env,
    )
    assert said.exit_code == 0 and "r3 submitted to s1 (accepted)" in said.output, said.output
    shown = await asyncio.to_thread(runner.invoke, session_commands.app, ["show", "s1"], env=env)
    assert "rejected" in shown.output and "busy" in shown.output
    bad = await api.http.put("/v1/sessions/s1/input-policy", json={"policy": "later"})
    assert bad.status_code == 422
    reset = await asyncio.to_thread(
        runner.invoke, session_commands.app, ["input-policy", "s1", "enqueue"], env=env
    )
    assert reset.exit_code == 0 and "enqueue" in reset.output
    assert (await api.http.get("/v1/sessions/s1")).json()["input_policy"] == "enqueue"


async def test_a_budget_is_set_shown_and_cleared(api: Api) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    runner = CliRunner()
    await api.submit("r1", {"task": {"kind": "calc", "input": {"n": 1}}})
    put = await api.http.put("/v1/sessions/s1/budget", json={"budget": {"cost": 2.5}})
    assert put.status_code == 200
    view = (await api.http.get("/v1/sessions/s1")).json()
    assert view["budget"] == {"tokens": None, "cost": 2.5, "on_exceed": "ask"}
    assert view["usage"]["total"]["calls"] == 0
    said = await asyncio.to_thread(
        runner.invoke,
        session_commands.app,
        ["budget", "s1", "--tokens", "1000", "--on-exceed", "fail"],
        env=env,
    )
    assert said.exit_code == 0, said.output
    view = (await api.http.get("/v1/sessions/s1")).json()
    assert view["budget"] == {"tokens": 1000, "cost": None, "on_exceed": "fail"}, "replaced"
    bad = await asyncio.to_thread(runner.invoke, session_commands.app, ["budget", "s1"], env=env)
    assert bad.exit_code == 2 and "Invalid value" in bad.output, "neither tokens nor cost"
    cleared = await asyncio.to_thread(
        runner.invoke, session_commands.app, ["budget", "s1", "--clear"], env=env
    )
    assert cleared.exit_code == 0 and "no budget" in cleared.output
    assert (await api.http.get("/v1/sessions/s1")).json()["budget"] is None


async def test_a_session_reads_as_it_was_after_any_commit(tmp_path: Path) -> None:
    async with open_api(tmp_path / "api") as api:
        await api.submit("r0", {"task": {"kind": "calc", "input": {"n": 1}}})
        await api.k.run()
        head = (await api.http.get("/v1/sessions/s1")).json()
        assert not head["active"]
        first = (await api.http.get("/v1/sessions/s1", params={"at": 1})).json()
        assert first["seq"] == 1 and first["tasks"] == [] and first["active"]
        assert [s["status"] for s in first["submissions"]] == ["accepted"]
        beyond = await api.http.get("/v1/sessions/s1", params={"at": head["seq"] + 1})
        assert beyond.status_code == 404 and "commits, not" in beyond.json()["error"]["message"]
        env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
        shown = await asyncio.to_thread(
            CliRunner().invoke, session_commands.app, ["show", "s1", "--at", "1"], env=env
        )
        assert shown.exit_code == 0 and "seq 1" in shown.output and "accepted" in shown.output
    # with a baseline every 2 commits: read from the newest baseline at or before the seq
    async with kernel(tmp_path / "k", registry(), baseline_every=2, baselines_kept=50) as k:
        for n in range(3):
            await k.submit_task("calc", {"n": n}, request_id=f"r{n}")
            await k.run()
        await k.store.flush()  # the baselines written in the background
        seq = (await k.store.session("s1")).seq
        from_baselines = 0
        for at in range(1, seq + 1):
            past = (await k.store.session_at("s1", at)).state
            from_baselines += past.archived_tasks > 0
            replayed = await _replayed(k.store, at)
            assert past.seq == at and past.fence == replayed.fence
            assert {t for t, task in past.tasks.items() if not task.is_terminal} == {
                t for t, task in replayed.tasks.items() if not task.is_terminal
            }
            assert len(past.tasks) + past.archived_tasks == len(replayed.tasks)
            assert past.entry_count == replayed.entry_count
        assert from_baselines, "some reads started from a baseline"


async def _replayed(store: Any, seq: int) -> Any:
    """The state after ``seq``, replayed from the first commit (no baseline)."""
    from session_store import SessionState
    from session_store.state import apply

    state = SessionState(session_id="s1")
    for record in await store.commits("s1", limit=seq):
        apply(state, record)
    return state


def test_the_server_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {**os.environ, "BH_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    env.pop("BH_SESSION_API_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "session_api"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "BH_SESSION_API_TOKEN" in done.stderr


async def test_the_server_serves_with_a_token(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "BH_REDIS_URL"},  # no wake queue
        "BH_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}",
        "BH_SESSION_API_TOKEN": TOKEN,
        "PYTHONUNBUFFERED": "1",
    }
    server = subprocess.Popen(  # noqa: ASYNC220 (started once; the test polls it over HTTP)
        [sys.executable, "-m", "session_api", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def up() -> bool:
                assert server.poll() is None, server.communicate()[1]
                try:
                    return (await http.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await assert_eventually(up, within=15, interval=0.1)
            assert (await http.get("/v1/sessions")).status_code == 401
            created = await http.post(
                "/v1/sessions/s1/submissions",
                json={"request_id": "r1", "input": "hi"},
                headers=AUTH,
            )
            assert created.status_code == 201, created.text
            async with http.stream("GET", "/v1/sessions/s1/events", headers=AUTH) as stream:
                assert stream.status_code == 200
                server.terminate()  # an open stream must not hold the server up
                async for _ in stream.aiter_lines():
                    pass
    finally:
        if server.poll() is None:
            server.terminate()
        _, stderr = server.communicate(timeout=15)
    assert server.returncode == 0, stderr
    assert TOKEN not in stderr and "no wake queue" in stderr


async def _report_blocked(api: Api, task_id: str, reason: str) -> None:
    """What the scheduler will do: name a blocked task in the control document."""
    handle = await api.k.store.session("s1")
    patch = DocumentPatch(name=CONTROL_DOCUMENT, patch={"blocked": {task_id: reason}}, create=True)
    await handle.commit(Commit(documents=(patch,)), fence=None)


async def test_a_session_is_forked_through_the_api_and_the_cli(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "parent"}})
    await api.k.run("s1")
    head = (await api.k.store.session("s1")).seq
    fork = {"at": head - 1, "into": "s2"}
    made = await api.http.post("/v1/sessions/s1/fork", json=fork)
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["session_id"], body["origin"], body["at"], body["seq"]) == (
        "s2",
        "s1",
        head - 1,
        1,
    )
    assert "not undone" in body["note"]
    again = await api.http.post("/v1/sessions/s1/fork", json=fork)
    assert again.status_code == 200, "a retry finds its own fork"
    other = await api.http.post("/v1/sessions/s1/fork", json={"at": 1, "into": "s2"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "already_exists"
    past = await api.http.post("/v1/sessions/s1/fork", json={"at": head + 1, "into": "s3"})
    assert past.status_code == 404
    bad = await api.http.post("/v1/sessions/s1/fork", json={"at": 1, "into": "no spaces"})
    assert bad.status_code in (400, 422)
    async with httpx.AsyncClient(base_url=api.url) as stranger:
        anonymous = await stranger.post("/v1/sessions/s1/fork", json={"at": 1, "into": "s4"})
    assert anonymous.status_code == 401
    await api.k.run("s2")
    assert (await api.k.store.session("s2")).state.submissions["r1"].status.value == "answered"

    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    said = await asyncio.to_thread(
        CliRunner().invoke,
        session_commands.app,
        ["fork", "s1", "--at", "1", "--into", "s5"],
        env=env,
    )
    assert said.exit_code == 0, said.output
    assert "forked s1 at commit 1 into s5" in said.output and "not undone" in said.output
    assert (await api.k.store.session("s1")).seq == head, "the original is untouched"


async def test_the_cli_refuses_clearly_what_a_newcomer_might_type(api: Api, tmp_path: Path) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}

    def cli(*args: str, stdin: str | None = None) -> Any:
        return CliRunner().invoke(session_commands.app, list(args), env=env, input=stdin)

    slash = await asyncio.to_thread(cli, "submit", "a/b", "hello")
    assert slash.exit_code == 2 and "session id 'a/b' is not allowed" in slash.output
    blank = await asyncio.to_thread(cli, "submit", "s1", "   ")
    assert blank.exit_code != 0 and "the message is empty" in blank.output
    piped = await asyncio.to_thread(cli, "submit", "s1", "-", "--request-id", "p1", stdin="hi\n")
    assert piped.exit_code == 0, piped.output
    note = tmp_path / "note.txt"
    note.write_text("from a file")
    filed = await asyncio.to_thread(cli, "submit", "s1", "--file", str(note), "--request-id", "f1")
    assert filed.exit_code == 0, filed.output
    state = (await api.k.store.session("s1")).state
    assert (state.submissions["p1"].input, state.submissions["f1"].input) == ("hi\n", "from a file")
    unknown = await asyncio.to_thread(cli, "watch", "nosuch")
    assert unknown.exit_code != 0 and "has no commits" in unknown.output
    huge = tmp_path / "huge.txt"
    huge.write_text("x" * 5_000_000)  # 5 MB, from a file as a newcomer would send a log
    refused = await asyncio.to_thread(cli, "submit", "s1", "--file", str(huge))
    assert refused.exit_code == 2, refused.output
    assert "over this API's limit" in refused.output and "commit 1" not in refused.output

    big = await api.http.post(
        "/v1/sessions/s1/submissions", json={"request_id": "big", "input": "x" * 200_000}
    )
    assert big.status_code == 413, big.text
    said = big.json()["error"]
    assert said["code"] == "payload_too_large" and "the input is 200 KB" in said["message"]
    empty = await api.http.post(
        "/v1/sessions/s1/submissions", json={"request_id": "e", "input": ""}
    )
    assert empty.status_code == 422 and "empty" in empty.json()["error"]["message"]
    assert set((await api.k.store.session("s1")).state.submissions) == {"p1", "f1"}


def test_watch_says_when_its_stream_is_down() -> None:
    watcher = session_commands.Watcher(
        SessionApiClient("http://127.0.0.1:1", TOKEN), "s1", entries=5, until_done=False
    )
    view = SessionView.model_validate(
        {
            "session_id": "s1",
            "seq": 3,
            "fence": 1,
            "active": True,
            "submissions": [],
            "tasks": [],
            "operations": [],
            "operations_total": 0,
            "entries": [],
            "entry_count": 0,
            "blocked": [],
        }
    )
    watcher._retrying(2, StoreUnavailable("connection refused"))
    console = Console(width=200, record=True)
    console.print(watcher._shown(view))
    assert "connection to the Session API lost" in console.export_text()
    watcher._take(view)
    assert watcher.lost is None, "an item from the stream clears it"


async def test_sessions_says_why_a_finished_session_is_not_listed(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "calc", "input": {"n": 2}}})
    await api.k.run("s1")
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    listed = await asyncio.to_thread(
        CliRunner().invoke, session_commands.app, ["sessions"], env=env
    )
    assert listed.exit_code == 0 and "Finished sessions are listed with --all" in listed.output


async def test_every_session_is_listed_with_all_by_status_prefix_and_page(api: Api) -> None:
    """``all``: the directory of every session, finished ones too, in id order and
    pages; ``status`` and ``prefix`` narrow it (what an operator looks for a day later)."""
    calc = {"task": {"kind": "calc", "input": {"n": 2}}}
    for session in ("acme:1", "acme:2"):
        await api.submit("r1", calc, session=session)
        await api.k.run(session)
    await api.submit("r1", session="beta:1")  # left open
    assert (await api.http.get("/v1/sessions")).json()["sessions"][0]["session_id"] == "beta:1"

    every = (await api.http.get("/v1/sessions?all=true")).json()
    assert [s["session_id"] for s in every["sessions"]] == ["acme:1", "acme:2", "beta:1"]
    assert [s["active"] for s in every["sessions"]] == [False, False, True]
    assert every["next_after"] is None
    finished = (await api.http.get("/v1/sessions?all=true&status=finished")).json()
    assert [s["session_id"] for s in finished["sessions"]] == ["acme:1", "acme:2"]
    active = (await api.http.get("/v1/sessions?all=true&status=active")).json()
    assert [s["session_id"] for s in active["sessions"]] == ["beta:1"]
    first = (await api.http.get("/v1/sessions?all=true&limit=2")).json()
    assert [s["session_id"] for s in first["sessions"]] == ["acme:1", "acme:2"]
    assert first["next_after"] == "acme:2" and first["truncated"] is True
    rest = (await api.http.get("/v1/sessions?all=true&limit=2&after=acme:2")).json()
    assert [s["session_id"] for s in rest["sessions"]] == ["beta:1"]
    by_id = (await api.http.get("/v1/sessions?all=true&prefix=acme:")).json()
    assert [s["session_id"] for s in by_id["sessions"]] == ["acme:1", "acme:2"]
    assert by_id["sessions"][0]["kinds"] == ["calc"]
    by_kind = (await api.http.get("/v1/sessions?all=true&kind=calc")).json()
    assert [s["session_id"] for s in by_kind["sessions"]] == ["acme:1", "acme:2"]
    wrong = await api.http.get("/v1/sessions?status=done")
    assert wrong.status_code == 422 and wrong.json()["error"]["details"]["field"] == "status"

    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    listed = await asyncio.to_thread(
        CliRunner().invoke,
        session_commands.app,
        ["sessions", "--all", "--status", "finished"],
        env=env,
    )
    assert listed.exit_code == 0, listed.output
    assert "acme:1" in listed.output and "acme:2" in listed.output and "beta:1" not in listed.output
