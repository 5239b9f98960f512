"""The web console over HTTP: its login cookie (HttpOnly, SameSite=Strict) reads
anything and writes only the console's own forms, each with a CSRF token; its pages
render a session's graph, timeline and operations; its actions are the API's own."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from brain.context import PhaseContext
from brain.outcome import Done
from brain.tools import ToolSpec
from contracts import InvalidInput, Operation, OperationResult, OperationStatus, OutcomeUnknown
from contracts.fleet import HandsBeat, QueueBacklog, RunningOperation, SchedulerBeat
from session_api.console.pages import LIST_PAGE
from session_api.server import SessionApiSettings
from tests.integration.test_session_api import TOKEN, Api, open_api
from tests.support.console import console_cookie, csrf_of, log_in
from tests.support.kernel import kind
from webapi.auth import Grant


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as opened:
        yield opened


@asynccontextmanager
async def browser(api: Api, token: str = TOKEN) -> AsyncIterator[httpx.AsyncClient]:
    """A client that logged in through the form (cookies kept, no Authorization)."""
    async with httpx.AsyncClient(base_url=api.url) as client:
        await log_in(client, token)
        yield client


async def test_the_login_form_is_refused_without_its_own_token_or_from_another_origin(
    api: Api,
) -> None:
    """Issue 31: the login form checked the API token only, so a form on another site
    could log a victim's browser in as the attacker (login CSRF). The form now carries a
    token that must equal a short-lived cookie set with it (double submit; the cookie
    is ``HttpOnly``, ``SameSite=Strict`` and sent to the login form only), and a form
    posted from another origin is refused."""
    async with httpx.AsyncClient(base_url=api.url) as client:
        forged = await client.post("/console/login", data={"token": TOKEN})  # cross-site
        assert forged.status_code == 403 and "log in again" in forged.text
        assert not any(c.startswith("bh_console=") for c in forged.headers.get_list("set-cookie"))
        form = await client.get("/console/login")
        (cookie,) = form.headers.get_list("set-cookie")
        assert cookie.startswith("bh_login=") and "HttpOnly" in cookie
        assert "Path=/console/login" in cookie and "SameSite=strict" in cookie
        assert "Max-Age=" in cookie
        token = csrf_of(form.text)
        wrong = await client.post("/console/login", data={"token": TOKEN, "csrf": "0" * 64})
        assert wrong.status_code == 403
        token = csrf_of(wrong.text)  # the refused form is offered again, with a new token
        foreign = await client.post(
            "/console/login",
            data={"token": TOKEN, "csrf": token},
            headers={"Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403 and "another origin" in foreign.text
        token = csrf_of(foreign.text)
        logged = await client.post("/console/login", data={"token": TOKEN, "csrf": token})
        assert logged.status_code == 303
        assert "Secure" not in console_cookie(logged)  # plain HTTP, no public URL
        spent = [c for c in logged.headers.get_list("set-cookie") if c.startswith("bh_login=")]
        assert spent and "Max-Age=0" in spent[0], "the login form's cookie is spent"
        assert (await client.get("/console/sessions")).status_code == 200


async def test_behind_a_tls_proxy_the_cookie_is_secure_and_forms_come_from_the_public_origin(
    tmp_path: Path,
) -> None:
    """Issue 31: behind a proxy that terminates TLS the API sees plain HTTP, so the
    cookie lost its ``Secure`` flag. With a public URL configured, ``Secure`` follows
    its scheme and the forms' origin is checked against it, not the ``Host`` the proxy
    forwards."""
    public = "https://console.example.com"
    # the browser speaks HTTPS to the proxy, which speaks HTTP to the API: the test is
    # the proxy, handing the browser's (Secure) cookies on by hand
    async with (
        open_api(tmp_path, public_url=public) as api,
        httpx.AsyncClient(base_url=api.url) as proxy,
    ):
        form = await proxy.get("/console/login")
        login_cookie = form.cookies["bh_login"]
        assert "Secure" in form.headers["set-cookie"]
        body = {"token": TOKEN, "csrf": csrf_of(form.text)}
        cookies = {"Cookie": f"bh_login={login_cookie}"}
        inside = await proxy.post(  # the API's own origin is not the browser's
            "/console/login", data=body, headers=cookies | {"Origin": api.url}
        )
        assert inside.status_code == 403
        body["csrf"] = csrf_of(inside.text)
        cookies = {"Cookie": f"bh_login={inside.cookies['bh_login']}"}
        logged = await proxy.post("/console/login", data=body, headers=cookies | {"Origin": public})
        assert logged.status_code == 303 and "Secure" in console_cookie(logged)
        cookies = {"Cookie": f"bh_console={logged.cookies['bh_console']}"}
        token = csrf_of((await proxy.get("/console/sessions", headers=cookies)).text)
        refused = await proxy.post(
            "/console/logout", data={"csrf": token}, headers=cookies | {"Origin": api.url}
        )
        assert refused.status_code == 403
        out = await proxy.post(
            "/console/logout", data={"csrf": token}, headers=cookies | {"Origin": public}
        )
        assert out.status_code == 303 and "Secure" in console_cookie(out)


def test_the_public_url_and_the_stream_caps_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BH_SESSION_API_TOKENS_FILE", raising=False)
    for name, value in (
        ("BH_SESSION_API_TOKEN", TOKEN),
        ("BH_STORE_URL", "sqlite:///x.db"),
        ("BH_SESSION_API_PUBLIC_URL", "https://console.example.com/"),
        ("BH_SESSION_API_MAX_STREAMS", "3"),
        ("BH_SESSION_API_MAX_STREAMS_PER_TOKEN", "1"),
    ):
        monkeypatch.setenv(name, value)
    settings = SessionApiSettings.from_env()
    assert settings.public_url == "https://console.example.com"
    assert (settings.max_streams, settings.max_streams_per_token) == (3, 1)
    for wrong in ("ftp://a.b", "https://a.b/console", "a.b", "https://a.b/?x=1"):
        monkeypatch.setenv("BH_SESSION_API_PUBLIC_URL", wrong)
        with pytest.raises(InvalidInput, match="public_url"):
            SessionApiSettings.from_env()


async def test_a_token_restricted_to_some_sessions_sees_no_fleet(tmp_path: Path) -> None:
    """Issue 31: the fleet page showed a tenant's token the whole deployment (routes,
    Brains, Hands with their hosts and pids, backlogs); like ``/metrics``, it is the
    deployment's: 403 for a restricted token, whose pages do not link it."""
    acme = "acme-token-0123456789abcdef"
    grant = Grant(name="acme", token=SecretStr(acme), access="operate", tenants=("acme",))
    async with open_api(tmp_path, tokens=(grant,)) as api:
        async with browser(api, acme) as client:
            page = await client.get("/console/sessions")
            assert page.status_code == 200 and 'href="/console/fleet"' not in page.text
            fleet = await client.get("/console/fleet")
            assert fleet.status_code == 403 and "deployment" in fleet.text
        async with browser(api) as client:
            page = await client.get("/console/sessions")
            assert 'href="/console/fleet"' in page.text
            assert (await client.get("/console/fleet")).status_code == 200


async def test_ids_in_console_paths_are_checked_at_the_door(api: Api) -> None:
    """As on the API's own routes: a malformed id in a console path is 422 naming the
    path's field, before anything reads the store."""
    async with browser(api) as client:
        token = csrf_of((await client.get("/console/sessions")).text)
        for method, path in (
            ("GET", "/console/sessions/-bad"),
            ("GET", f"/console/sessions/{'x' * 5000}/live"),
            ("GET", "/console/operations/a%20b"),
            ("GET", "/console/operations/-op/output"),
            ("POST", "/console/sessions/-bad/cancel"),
            ("POST", "/console/operations/-op/settle"),
        ):
            response = await client.request(method, path, data={"csrf": token})
            assert response.status_code == 422, (method, path, response.text[:200])
            error = response.json()["error"]
            assert error["details"]["location"] == "path", error
            assert len(response.text) < 1000


async def test_pages_need_a_login_and_the_cookie_writes_only_console_forms(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        sent = await anonymous.get("/console/sessions")
        assert sent.status_code == 303 and sent.headers["location"] == "/console/login"
        form = await anonymous.get("/console/login")
        assert form.status_code == 200
        wrong = await anonymous.post(
            "/console/login", data={"token": "x" * 24, "csrf": csrf_of(form.text)}
        )
        assert wrong.status_code == 401
        assert not any(c.startswith("bh_console=") for c in wrong.headers.get_list("set-cookie"))
        assert (await anonymous.post("/console/sessions/s1/cancel", data={})).status_code == 401

    await api.submit("r1", {"task": {"kind": "ask", "input": {}}})
    await api.k.run("s1")
    async with browser(api) as client:
        listed = await client.get("/console/sessions")
        assert listed.status_code == 200 and "s1" in listed.text
        assert "script-src 'self'" in listed.headers["content-security-policy"]
        assert (await client.get("/v1/sessions/s1")).status_code == 200  # reads: yes
        body = {"request_id": "r2", "input": "hi"}
        submitted = await client.post("/v1/sessions/s1/submissions", json=body)
        assert submitted.status_code == 401  # an API write never rides on the cookie
        unsigned = await client.post("/console/sessions/s1/cancel", data={"request_id": "r1"})
        assert unsigned.status_code == 403 and "CSRF" in unsigned.text
        token = csrf_of((await client.get("/console/sessions/s1")).text)
        foreign = await client.post(
            "/console/sessions/s1/cancel",
            data={"request_id": "r1", "csrf": token},
            headers={"Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403
        view = (await api.http.get("/v1/sessions/s1")).json()
        assert view["cancel_requests"] == {}  # nothing was recorded by the refused forms

        out = await client.post("/console/logout", data={"csrf": token})
        assert out.status_code == 303 and 'bh_console=""' in out.headers["set-cookie"]


async def test_a_question_is_answered_and_a_task_cancelled_from_the_page(api: Api) -> None:
    await api.submit("r1", {"task": {"kind": "ask", "input": {}}})
    await api.submit("r2", {"task": {"kind": "ask", "input": {}}}, session="s2")
    await api.k.run("s1")
    await api.k.run("s2")
    async with browser(api) as client:
        page = (await client.get("/console/sessions/s1")).text
        assert "Waiting for a person" in page and "Which?" in page
        assert 'class="task waiting depth-0"' in page and "Timeline" in page
        token = csrf_of(page)
        answered = await client.post(
            "/console/sessions/s1/answer", data={"question_id": "q1", "value": "red", "csrf": token}
        )
        assert answered.status_code == 303 and "notice=answer" in answered.headers["location"]
        await api.k.run("s1")
        done = (await api.http.get("/v1/sessions/s1")).json()
        assert done["submissions"][0]["answer"] == "red"

        other = (await api.http.get("/v1/sessions/s2")).json()["tasks"][0]["id"]
        cancelled = await client.post(
            "/console/sessions/s2/cancel", data={"task_id": other, "csrf": token}
        )
        assert cancelled.status_code == 303
        notice = (await client.get(cancelled.headers["location"])).text
        assert f"cancel of {other} recorded" in notice
        await api.k.run("s2")
        after = (await api.http.get("/v1/sessions/s2")).json()
        assert after["active"] is False

        forked = await client.post(
            "/console/sessions/s1/fork", data={"at": "1", "into": "s1-again", "csrf": token}
        )
        assert forked.status_code == 303
        assert forked.headers["location"].startswith("/console/sessions/s1-again")
        assert "fork of s1 at commit 1" in (await client.get("/console/sessions/s1-again")).text


async def test_a_session_of_many_commits_pages_its_timeline(api: Api) -> None:
    for n in range(120):
        await api.submit(f"r{n}", "hi")
    async with browser(api) as client:
        page = (await client.get("/console/sessions/s1")).text
        seqs = [int(s) for s in re.findall(r'class="commit[^"]*" data-seq="(\d+)"', page)]
        assert seqs == list(range(120, 70, -1))  # the newest 50, newest first
        older = re.search(r'href="\?older=(\d+)"', page)
        assert older is not None
        before = (await client.get(f"/console/sessions/s1?older={older.group(1)}")).text
        seqs = [int(s) for s in re.findall(r'class="commit[^"]*" data-seq="(\d+)"', before)]
        assert seqs == list(range(70, 20, -1))


async def test_the_fleet_page_shows_each_hands_beat_and_the_dispatch_stream(api: Api) -> None:
    """The Hands' beats from the store: slots, operations with their containers (linked),
    the dispatch backlog from the freshest beat, and a silent Hands marked so; with no
    scheduler beat, the results stream says it was not read."""
    now = datetime.now(UTC)
    store = api.k.store
    running = RunningOperation(
        operation_id="op-abc",
        tool="send_email",
        session_id="s1",
        since=now - timedelta(seconds=12),
        container="bh-x_op-abc",
        state="running",
    )
    queue = QueueBacklog(pending=7, ack_pending=1, oldest_age_seconds=42.0)
    await store.fleet.beat(
        HandsBeat(
            executor="hands-live",
            process="host-a pid 10",
            concurrency=4,
            running=(running,),
            queue=queue,
            beat_at=now,
            every_seconds=10,
        )
    )
    await store.fleet.beat(
        HandsBeat(
            executor="hands-dead",
            process="host-b pid 11",
            concurrency=2,
            beat_at=now - timedelta(minutes=5),
            every_seconds=10,
        )
    )
    async with browser(api) as client:
        page = (await client.get("/console/fleet")).text
    assert page.count('class="hands-instance') == 2 and page.count('class="stream"') == 2
    live = page[page.index('data-executor="hands-live"') :]
    live = live[: live.index("</tr>")]
    assert "1 of 4" in live and "bh-x_op-abc" in live and "(running)" in live
    assert 'href="/console/operations/op-abc"' in live and "silent" not in live
    dead = page[page.index('data-executor="hands-dead"') :]
    dead = dead[: dead.index("</tr>")]
    assert "0 of 2" in dead and "silent" in dead and 'class="hands-instance stale"' in page
    stream = page[page.index('data-stream="dispatch"') :]
    stream = stream[: stream.index("</tr>")]
    assert "<td>7</td><td>1</td><td>42.0 s</td>" in stream and "hands-live" in stream
    results = page[page.index('data-stream="results"') :]
    assert "not read lately" in results[: results.index("</tr>")]
    assert "No scheduler has beaten" in page


async def test_the_fleet_page_shows_each_schedulers_beat_and_both_streams(api: Api) -> None:
    """A scheduler's beat carries both streams' backlogs: shown with no Hands running
    (the dispatch backlog an autoscaler scales the Hands from zero on); the fresher of
    two readings of the dispatch stream is the one shown; a silent scheduler is marked."""
    now = datetime.now(UTC)
    fleet = api.k.store.fleet.schedulers
    await fleet.beat(
        SchedulerBeat(
            scheduler="sched-a",
            process="host-a pid 7",
            dispatch=QueueBacklog(pending=3, ack_pending=0, oldest_age_seconds=9.5),
            results=QueueBacklog(pending=2, ack_pending=1, oldest_age_seconds=4.0),
            beat_at=now,
            every_seconds=10,
        )
    )
    await fleet.beat(
        SchedulerBeat(
            scheduler="sched-old",
            process="host-b pid 8",
            dispatch=QueueBacklog(pending=99, ack_pending=9, oldest_age_seconds=99.0),
            beat_at=now - timedelta(minutes=5),
            every_seconds=10,
        )
    )
    async with browser(api) as client:
        page = (await client.get("/console/fleet")).text
    dispatch = page[page.index('data-stream="dispatch"') :]
    dispatch = dispatch[: dispatch.index("</tr>")]
    assert "<td>3</td><td>0</td><td>9.5 s</td>" in dispatch and "sched-a" in dispatch
    results = page[page.index('data-stream="results"') :]
    results = results[: results.index("</tr>")]
    assert "<td>2</td><td>1</td><td>4.0 s</td>" in results and "sched-a" in results
    assert page.count('<tr class="scheduler') == 2 and 'class="scheduler stale"' in page


async def test_an_operation_page_links_its_whole_output_and_log(api: Api) -> None:
    """The page shows an excerpt; its links serve the whole output (inline JSON or the
    result's blob) and the log the Hands kept, as plain text behind the same grant."""
    store = api.k.store
    await api.submit("r1", "hi")
    big = {"lines": [f"line {n:05d}" for n in range(4_000)]}  # > OUTPUT_CHARS as JSON
    output, blob = await store.put_output(big)
    assert blob is not None, "the output is large enough to be a blob"
    for operation_id, stored, ref in (("op-big", output, blob), ("op-small", {"ok": 1}, None)):
        await store.create_operation(
            Operation(operation_id=operation_id, session_id="s1", tool="shell")
        )
        await store.put_operation_result(
            OperationResult(
                operation_id=operation_id,
                session_id="s1",
                succeeded=True,
                output=stored,
                blob=ref,
                log_tail="starting\n<b>done</b>\n",
            )
        )
    async with browser(api) as client:
        page = (await client.get("/console/operations/op-big")).text
        assert "(truncated: the first" in page
        assert 'href="/console/operations/op-big/output"' in page
        assert 'href="/console/operations/op-big/log"' in page
        whole = await client.get("/console/operations/op-big/output")
        assert whole.status_code == 200 and whole.headers["content-type"].startswith("text/plain")
        assert whole.headers["x-content-type-options"] == "nosniff"
        assert json.loads(whole.text) == big
        small = await client.get("/console/operations/op-small/output")
        assert json.loads(small.text) == {"ok": 1}
        log = await client.get("/console/operations/op-big/log")
        assert log.text == "starting\n<b>done</b>\n"
        assert log.headers["content-type"].startswith("text/plain")
        missing = await client.get("/console/operations/op-none/output")
        assert missing.status_code == 404
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        refused = await anonymous.get("/console/operations/op-big/output")
        assert refused.status_code == 303 and refused.headers["location"] == "/console/login"


async def test_the_list_of_sessions_with_work_left_is_paged(api: Api) -> None:
    for n in range(LIST_PAGE + 3):
        await api.submit("r1", "hi", session=f"p{n:03d}")
    async with browser(api) as client:
        first = (await client.get("/console/sessions")).text
        shown = re.findall(r'<a href="/console/sessions/(p\d+)">', first)
        assert len(shown) == LIST_PAGE
        link = re.search(r'class="next" href="([^"]+)"', first)
        assert link is not None and "all=true" not in link.group(1)
        rest = (await client.get(html.unescape(link.group(1)))).text
        more = re.findall(r'<a href="/console/sessions/(p\d+)">', rest)
    assert sorted(shown + more) == [f"p{n:03d}" for n in range(LIST_PAGE + 3)]
    assert 'class="next"' not in rest
    async with browser(api) as client:  # the filter form's "any" status sends status=
        anyone = await client.get("/console/sessions", params={"status": "", "prefix": "p05"})
        assert anyone.status_code == 200 and anyone.text.count('<a href="/console/sessions/p') == 3
        wrong = await client.get("/console/sessions", params={"status": "done"})
        assert wrong.status_code == 422 and "no session status 'done'" in wrong.text


async def test_an_id_pasted_into_the_search_finds_a_finished_session(api: Api) -> None:
    """The sessions page lists those with work left; a finished session's exact id,
    pasted into the search, is offered as a link all the same (an id from a log or an
    alert); an id of no session is not."""
    await api.submit("r1", {"task": {"kind": "calc", "input": {"n": 2}}}, session="done-1")
    await api.k.run("done-1")
    async with browser(api) as client:
        page = (await client.get("/console/sessions", params={"prefix": "done-1"})).text
        assert 'class="exact"' in page and 'href="/console/sessions/done-1"' in page
        assert "No session matches" in page  # the list itself: work left only
        none = (await client.get("/console/sessions", params={"prefix": "nope"})).text
        assert 'class="exact"' not in none


async def test_an_uncertain_operation_is_settled_from_its_page_and_its_task_goes_on(
    api: Api,
) -> None:
    """A tool call whose outcome is unknown parks its task; the session page links the
    operation, whose page offers the settle form (the API's own settle: recorded by the
    store with the token's name and the reason, then the session woken); the task then
    goes on with the settled output as the call's result. A second decision is refused,
    and so is a settle through the API for another session's operation."""

    async def lost(args: dict[str, object], operation_id: str) -> object:
        raise OutcomeUnknown("the provider hung up before answering")

    async def charge(ctx: PhaseContext) -> Done:
        performed = await ctx.operation("charge", {"card": "4242"}, "charge")
        return Done(result=performed.output)

    api.k.tools.register(ToolSpec(name="charge"), lost)
    api.k.registry.add(kind("charge-once", {"start": charge}))
    await api.submit("r1", {"task": {"kind": "charge-once"}})
    await api.k.run("s1")
    (op,) = [o for o in (await api.http.get("/v1/sessions/s1")).json()["operations"]]
    assert op["status"] == "uncertain"
    operation_id = op["operation_id"]
    wrong = f"/v1/sessions/other/operations/{operation_id}/settle"
    body = {"outcome": "succeeded", "reason": "x"}
    assert (await api.http.post(wrong, json=body)).status_code == 404

    async with browser(api) as client:
        session_page = (await client.get("/console/sessions/s1")).text
        assert f'href="/console/operations/{operation_id}#settle"' in session_page
        page = (await client.get(f"/console/operations/{operation_id}")).text
        assert 'id="settle"' in page and "outcome is unknown" in page
        form = {
            "csrf": csrf_of(page),
            "outcome": "succeeded",
            "output": '{"charged": true}',
            "reason": "the provider's dashboard shows the charge",
        }
        bad = await client.post(
            f"/console/operations/{operation_id}/settle", data=form | {"output": "{oops"}
        )
        assert bad.status_code == 422 and "not JSON" in bad.text
        settled = await client.post(f"/console/operations/{operation_id}/settle", data=form)
        assert settled.status_code == 303, settled.text
        assert "settled+as+succeeded+by+default" in settled.headers["location"]
        again = await client.post(
            f"/console/operations/{operation_id}/settle", data=form | {"reason": "twice"}
        )
        assert again.status_code == 409 and "only an uncertain operation" in again.text

    record = await api.k.store.get_operation(operation_id)
    assert record is not None and record.status is OperationStatus.SUCCEEDED
    assert (record.decided_by, record.decision) == ("default", form["reason"])
    assert ("s1", "settle") in api.wakes.calls
    await api.k.run("s1")
    task = await api.k.task("root.r1")
    assert task.result == {"charged": True}, "the settled output is the call's result"
