"""The web console in a real browser: Debian's chromium, headless, driven by Playwright.

On ``bh up`` (the five-emails example, two Brains, two Hands in Docker): log in, open the
sessions page, follow a running session live until it is answered while the Brain that
holds it is killed mid-tool (the other Brain goes on with it; the killed one is started
again), and the Hands the fleet page shows running that email's container is killed
too — the page shows the five ``send_email`` operations and the takeover in its
timeline — and press cancel on another session and see it end.
A session of 50 tasks draws one legible row per task. Every process exports its spans
over OTLP to a receiver in the test: the five-emails session is one trace across both
Brains and both Hands. Screenshots of the main pages go
to ``BH_CONSOLE_SCREENSHOTS`` (the ones in docs/ were made so) or the test's own dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from playwright.async_api import Browser, Page, async_playwright, expect
from pydantic import SecretStr

from bh.devstack.process import read_pidfile
from bh.example_stack import EMAIL_PORT
from brain.context import PhaseContext
from brain.model.scripted import Script, scripted_app
from brain.model.settings import ModelSettings
from brain.outcome import Done, Effects, PhaseOutcome, TaskSpec, Wait
from brain.registry import Registry
from brain.runner import DriveReport
from brain.worker import WorkerSettings, run_worker
from contracts import PROGRESS_DOCUMENT
from contracts.question import ApprovalRule, Question
from examples.emails.client import EmailClient
from runtime.tracing import work_context
from session_api.app import create_app
from session_api.stream import StreamSettings
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.integration.test_system import bh, system_env
from tests.support.eventually import assert_eventually
from tests.support.http_server import free_port, serve
from tests.support.images import tool_images
from tests.support.kernel import kernel, kind
from tests.support.otlp import Receiver, otlp_receiver
from tests.support.services import missing
from tests.support.workspaces import apply_version

TOKEN = "console-token-0123456789"


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    path = shutil.which("chromium")
    if path is None:
        missing("chromium is not installed (Debian's chromium; scripts/test installs it)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            await browser.close()


def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("BH_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


async def log_in(browser: Browser, url: str, token: str) -> Page:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()  # the context's cookie serves its other tabs too
    await page.goto(f"{url}/console/sessions")
    await expect(page).to_have_url(f"{url}/console/login")  # no cookie yet: the form
    await page.fill("input[name=token]", token)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{url}/console/sessions")
    return page


@pytest.mark.redis
@pytest.mark.nats
@pytest.mark.slow
@pytest.mark.xdist_group("bh-up")  # `bh up`'s fixed ports: one such test at a time
async def test_the_console_follows_a_session_through_a_brain_kill_and_cancels_another(
    tmp_path: Path, chromium: Browser
) -> None:
    with otlp_receiver() as receiver:
        env = system_env(tmp_path) | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "BH_HANDS_ACK_WAIT": "3",  # a killed Hands' operation is taken over soon
            "BH_HANDS_BEAT": "1",
        }
        await _follow_kill_and_cancel(tmp_path, chromium, env)
        _one_trace_across_the_kill(receiver, shots(tmp_path))


async def _follow_kill_and_cancel(tmp_path: Path, chromium: Browser, env: dict[str, str]) -> None:
    tool_images()
    up = (
        # a namespace of its own: a rerun within NATS's duplicate window (2 min) would
        # publish the same operation ids on the same streams, dropped as duplicates
        *("up", "--brains", "2", "--hands", "2", "--no-infra"),
        *("--namespace", f"sysconsole{uuid.uuid4().hex[:6]}"),
        *("--example", "five-emails", "--plugin", "tests.support.brain_plugins:plugin"),
    )
    started = bh(*up, env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        system = tmp_path / "dev" / "system"
        for line in (system / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
        url, token = env["BH_SESSION_API_URL"], env["BH_SESSION_API_TOKEN"]
        slow = {"request_id": "long", "input": {"task": {"kind": "slow", "input": 600}}}
        async with httpx.AsyncClient(base_url=url) as api:
            auth = {"Authorization": f"Bearer {token}"}
            posted = await api.post("/v1/sessions/other/submissions", json=slow, headers=auth)
            assert posted.status_code == 201, posted.text

        # the provider holds the first email's answer (then drops it): both kills land
        # while that email's container runs
        tokens = json.loads((system / "secrets.json").read_text())
        email_url = f"http://127.0.0.1:{EMAIL_PORT}"
        async with EmailClient(email_url, tokens["BH_EMAIL_SERVICE_TOKEN"]) as email:
            await email.set_faults(1, hold_seconds=20)

        page = await log_in(chromium, url, token)
        await expect(page.locator("table.sessions")).to_contain_text("other")
        text = "Send the approved maintenance notice to our five customers."
        submitted = bh("submit", "five", text, "--request-id", "notify-1", env=env)
        assert submitted.returncode == 0, submitted.stderr
        await page.goto(f"{url}/console/sessions")
        await page.click("a[href='/console/sessions/five']")
        await expect(page.locator("#stream-state")).to_contain_text("live")

        # the first email's operation appears live; then the Brain that holds the
        # session (its claimer: host:pid:suffix) dies mid-tool
        await expect(page.locator("tr.operation").first).to_be_visible(timeout=60_000)
        await asyncio.sleep(1.5)  # the Brain's spans so far leave in their batch (0.5 s)
        async with httpx.AsyncClient(base_url=url) as api:
            auth = {"Authorization": f"Bearer {token}"}
            holder = (await api.get("/v1/sessions/five", headers=auth)).json()["holder"]
        pids = {read_pidfile(system / "run" / f"brain-{n}.pid") for n in (1, 2)}
        holder_pid = int(holder.split(":")[1])
        assert holder_pid in {record.pid for record in pids if record is not None}, holder
        os.kill(holder_pid, signal.SIGKILL)

        # the fleet page (another tab) names the Hands running that email: kill it too;
        # the other takes the operation over (its container, not a new send)
        fleet = await page.context.new_page()
        await fleet.goto(f"{url}/console/fleet")
        busy = fleet.locator("tr.hands-instance", has=fleet.locator("li.running-op"))
        for _ in range(60):  # the page shows the beats of its load: reload until one runs it
            if await busy.count() and "(running)" in await busy.inner_text():
                break
            await asyncio.sleep(0.5)
            await fleet.reload()
        await expect(busy.locator("li.running-op")).to_contain_text("send_email")
        await expect(busy.locator("li.running-op")).to_contain_text("(running)")
        await fleet.screenshot(path=str(shots(tmp_path) / "console-fleet.png"), full_page=True)
        process = await busy.locator("td").nth(1).inner_text()
        os.kill(int(process.rsplit("pid", 1)[1]), signal.SIGKILL)
        await fleet.close()
        restarted = bh(*up, env=env)  # starts what is not running: the Brain and the Hands
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr

        answered = page.locator("tr[data-request='notify-1'] .pill.answered")
        await expect(answered).to_be_visible(timeout=120_000)
        operations = page.locator("tr.operation")
        await expect(operations).to_have_count(5)
        await expect(page.locator("section.operations")).to_contain_text("send_email")
        await expect(page.locator("tr.document").first).to_be_visible()  # the batch's plan
        await expect(page.locator("tr.takeover").first).to_be_visible()
        await expect(page.locator("li.task.terminal button")).to_have_count(0)  # nothing to cancel
        where = shots(tmp_path)
        await page.screenshot(path=str(where / "console-session.png"), full_page=True)
        await page.click("tr.operation a >> nth=0")
        await expect(page.locator("h1")).to_contain_text("Operation")
        await expect(page.locator("section.result")).to_contain_text("succeeded")
        await page.screenshot(path=str(where / "console-operation.png"), full_page=True)

        await page.goto(f"{url}/console/sessions/other")
        await expect(page.locator("#stream-state")).to_contain_text("live")
        await page.click("tr[data-request='long'] button.danger")
        await expect(page.locator("p.notice")).to_contain_text("cancel of long recorded")
        ended = page.locator("tr[data-request='long'] .pill.cancelled")
        await expect(ended).to_be_visible(timeout=60_000)
        await page.goto(f"{url}/console/sessions?all=true")
        await expect(page.locator("table.sessions")).to_contain_text("five")
        await page.screenshot(path=str(where / "console-sessions.png"), full_page=True)
        await page.goto(f"{url}/console/fleet")
        await expect(page.locator("main")).to_contain_text("yes")  # the Brain's route
        brains = page.locator("tr.brain")  # the killed incarnation's record, and 2 live
        await expect(brains).to_have_count(3)
        await expect(brains.first).to_contain_text("of 8")
        # the killed Hands' last beat (silent, once three beats are missed), and two live;
        # the page is rendered once: reload it until the killed one's beat is silent
        await expect(page.locator("tr.hands-instance")).to_have_count(3)
        for _ in range(30):
            if await page.locator("tr.hands-instance.stale").count():
                break
            await asyncio.sleep(0.5)
            await page.reload()
        await expect(page.locator("tr.hands-instance.stale")).to_have_count(1)
    finally:
        bh("down", env=env)


def fan_out(children: int, grandchildren: int) -> Registry:
    """``root`` spawns ``children`` ``branch`` tasks, each spawning ``grandchildren``
    ``leaf`` tasks that wait for a person's answer (so all stay open and drawn)."""

    async def root(ctx: PhaseContext) -> PhaseOutcome:
        specs = [TaskSpec(id=f"{ctx.task.id}.b{n}", kind="branch") for n in range(children)]
        ids = tuple(spec.id for spec in specs)
        return Wait(tasks=ids, next_phase="done", effects=Effects(spawn=tuple(specs)))

    async def branch(ctx: PhaseContext) -> PhaseOutcome:
        specs = [TaskSpec(id=f"{ctx.task.id}.l{n}", kind="leaf") for n in range(grandchildren)]
        ids = tuple(spec.id for spec in specs)
        return Wait(tasks=ids, next_phase="done", effects=Effects(spawn=tuple(specs)))

    async def leaf(ctx: PhaseContext) -> PhaseOutcome:
        return Wait(question=Question(id=f"go-{ctx.task.id}", prompt="Go on?"), next_phase="done")

    async def done(ctx: PhaseContext) -> PhaseOutcome:
        return Done(result="done")

    registry = Registry()
    for name, start in (("root", root), ("branch", branch), ("leaf", leaf)):
        registry.add(kind(name, {"start": start, "done": done}))
    return registry


async def test_a_session_of_fifty_tasks_draws_one_legible_row_per_task(
    tmp_path: Path, chromium: Browser
) -> None:
    async with kernel(tmp_path, fan_out(children=7, grandchildren=6)) as k:
        await k.submit_task("root", session_id="wide")
        await k.run("wide")
        app = create_app(store=k.store, wakes=None, token=SecretStr(TOKEN))
        async with serve(app) as url:
            page = await log_in(chromium, url, TOKEN)
            try:  # the page's event stream must end before the server can stop
                await page.goto(f"{url}/console/sessions/wide")
                rows = page.locator("ol.tree li.task")
                await expect(rows).to_have_count(50)
                boxes: list[Any] = [await rows.nth(n).bounding_box() for n in range(50)]
                assert all(box is not None and box["height"] >= 14 for box in boxes)
                tops = [box["y"] for box in boxes]
                assert tops == sorted(tops) and len(set(tops)) == 50  # one row each, no overlap
                padding = "e => getComputedStyle(e).paddingLeft"
                indents = {await rows.nth(n).evaluate(padding) for n in range(50)}
                assert len(indents) == 3  # root, branches, leaves: three depths drawn
                shot = shots(tmp_path) / "console-graph-50.png"
                await page.locator("section.graph").screenshot(path=str(shot))
            finally:
                await page.close()


async def test_the_workspace_tab_draws_a_versions_tree_a_file_and_a_diff(
    tmp_path: Path, chromium: Browser
) -> None:
    """Issue 32: from a session's page, its Workspace tab draws the latest version's
    file tree (a file under its directory, indented), shows a file escaped, goes back
    to an earlier version, and diffs two versions chosen in the form."""
    async with kernel(tmp_path) as k:
        await apply_version(k.store, "ws", WORKSPACE_V1, operation_id="op-1")
        await apply_version(k.store, "ws", WORKSPACE_V2, operation_id="op-2")
        app = create_app(store=k.store, wakes=None, token=SecretStr(TOKEN))
        async with serve(app) as url:
            page = await log_in(chromium, url, TOKEN)
            try:
                await page.goto(f"{url}/console/sessions/ws")
                await page.click("nav.tabs a:has-text('Workspace')")
                rows = page.locator("ol.tree.files li.path")
                await expect(rows).to_have_count(4)  # pkg/, pkg/calc.py, NOTES.txt, page.html
                calc = page.locator("li.path[data-path='pkg/calc.py']")
                folder = page.locator("li.path[data-path='pkg']")
                padding = "e => parseFloat(getComputedStyle(e).paddingLeft)"
                assert await calc.evaluate(padding) > await folder.evaluate(padding)
                await page.click("li.path[data-path='page.html'] a")
                shown = page.locator("pre.file-text")
                await expect(shown).to_have_text("<b>bold?</b>")  # text, not markup
                await page.select_option("select[name=at]", "1")
                await page.click("form.versions button[type=submit]")
                await expect(rows).to_have_count(3)  # NOTES.txt came with version 2
                await page.screenshot(
                    path=str(shots(tmp_path) / "console-workspace.png"), full_page=True
                )
                await page.click("a:has-text('Diff between two versions')")
                await page.select_option("select[name=from]", "1")
                await page.select_option("select[name=to]", "2")
                await page.click("form.versions button[type=submit]")
                await expect(page.locator("li.change.added")).to_contain_text("NOTES.txt")
                await expect(page.locator("li.change.changed")).to_contain_text("pkg/calc.py")
                added = page.locator("pre.diff[data-path='pkg/calc.py'] span.add").last
                await expect(added).to_have_text("+    return a + b")
            finally:
                await page.close()


WORKSPACE_V1 = {
    "pkg/calc.py": b"def add(a, b):\n    return a - b\n",
    "page.html": b"<b>bold?</b>",
}
WORKSPACE_V2 = {
    **WORKSPACE_V1,
    "pkg/calc.py": b"def add(a, b):\n    return a + b\n",
    "NOTES.txt": b"fixed\n",
}


async def test_a_page_refused_a_stream_follows_the_session_once_a_slot_is_free(
    tmp_path: Path, chromium: Browser
) -> None:
    """Issue 31: event streams are capped per token, and a browser's ``EventSource``
    gives up for good on a refused connection (429). The page makes a new one after a
    pause: a second tab over the token's cap says its connection is lost, then follows
    the session live once the first tab is closed."""
    async with kernel(tmp_path) as k:
        await k.client.submit("s1", "r1", "hi")
        fast = StreamSettings(idle_poll=timedelta(seconds=0.3), max_open_per_token=1)
        app = create_app(store=k.store, wakes=None, token=SecretStr(TOKEN), streams=fast)
        async with serve(app) as url:
            first = await log_in(chromium, url, TOKEN)
            second = await first.context.new_page()
            try:
                await first.goto(f"{url}/console/sessions/s1")
                await expect(first.locator("#stream-state")).to_contain_text("live · seq 1")
                await second.goto(f"{url}/console/sessions/s1")
                state = second.locator("#stream-state")
                await expect(state).to_contain_text("connection lost")
                await first.close()
                await expect(state).to_contain_text("live · seq 1", timeout=15_000)
                await k.client.submit("s1", "r2", "again")
                await expect(state).to_contain_text("live · seq 2")
            finally:
                await second.close()
                await first.close()


def _one_trace_across_the_kill(receiver: Receiver, where: Path) -> None:
    """The five-emails session is one trace: the agent's phases on both Brain
    incarnations (before and after the kill), its model calls, and each email's
    ``execute_tool`` on the Brain and, as its child, on the Hands."""
    root = trace.get_current_span(work_context("five", "root.notify-1")).get_span_context()
    expected = f"{root.trace_id:032x}"
    agent = [
        s
        for s in receiver.named("invoke_agent ")
        if s.attributes["gen_ai.conversation.id"] == "five"
    ]
    assert agent and {s.trace_id for s in agent} == {expected}
    ours = [s for s in receiver.spans if s.trace_id == expected]
    runners = {s.attributes.get("brainhands.runner") for s in ours} - {None}
    assert len(runners) >= 2, runners  # the killed Brain's and another's
    chats = receiver.named("chat scripted-notices")
    assert len(chats) >= 2 and {s.trace_id for s in chats} == {expected}
    assert all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in chats)
    tools = receiver.named("execute_tool send_email")
    brain = {s.span_id: s for s in tools if s.service == "brainhands-brain"}
    hands = [s for s in tools if s.service == "brainhands-hands"]
    assert {s.trace_id for s in tools} == {expected}
    called = {s.attributes["gen_ai.tool.call.id"] for s in hands}
    assert len(called) == 5 and all(s.parent_span_id in brain for s in hands)
    claims = [s for s in receiver.named("claim") if s.trace_id == expected]
    assert len({s.attributes["brainhands.executor"] for s in claims}) >= 2  # the killed one too
    # each email ends with a result on a Hands' span; the held one, whose Hands was
    # killed while its container ran, by the Hands that collected that container (the
    # answer was lost: known from the tool's query) — handling the redelivered dispatch,
    # or reaping the container as a restarted Hands: either way in this trace
    ended = {
        s.attributes["gen_ai.tool.call.id"]: s.attributes.get("brainhands.result.path")
        for s in hands
        if s.attributes.get("brainhands.result.path")
    }
    assert set(ended) == called, ended
    assert sorted(ended.values()) == ["executed"] * 4 + ["verified"], ended
    keys = (
        "brainhands.task.id",
        "brainhands.runner",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.tool.call.id",
        "brainhands.result.path",
        "brainhands.container",
        "brainhands.executor",
    )
    tree = receiver.tree(expected, keys, root=f"{root.span_id:016x}")
    (where / "trace-five-emails.txt").write_text(tree)


#: wraps the page's EventSource to record the id of every commit event it receives
#: (test-side only: the console's own script is not changed for the test)
RECORD_COMMITS = """
(() => {
  const Original = window.EventSource;
  window.seenCommits = [];
  window.EventSource = function (url, options) {
    const source = new Original(url, options);
    source.addEventListener("commit", (e) => window.seenCommits.push(Number(e.lastEventId)));
    return source;
  };
  window.EventSource.prototype = Original.prototype;
})();
"""
APPROVALS = ApprovalRule(
    tool="echo", when={"properties": {"text": {"const": "launch"}}, "required": ["text"]}
)
#: the call is approved or denied on the page; then the answer streams, slowly enough
#: (60 words, 0.1 s apart) that the page shows it as a preview first
STREAMED = " ".join(f"w{n}" for n in range(60))
APPROVAL_SCRIPT = {
    "model": "m",
    "turns": [
        {"tool_calls": [{"name": "echo", "arguments": {"text": "launch"}}]},
        {"content": STREAMED, "stream_pause": 0.1},
    ],
}


class Restartable:
    """The Session API on one fixed port, stopped (open streams cut after 1 s, as a
    crashed or redeployed API would cut them) and started again."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await self._task


async def test_the_page_filters_approves_denies_streams_and_resumes_after_its_api_restarts(
    tmp_path: Path, chromium: Browser
) -> None:
    """Sessions waiting for a person and blocked ones are found by the status filter;
    an approval is approved on one page and denied on another; the page of the
    approved one stays open while its Session API is stopped, the Brain works on (the
    call runs, the answer starts streaming) and the API comes back: the page resumes
    after the last commit it had — every commit event once, none missed — shows the
    answer streaming as a preview, then answered."""
    store = await open_store(f"sqlite:///{tmp_path}/console.db")
    client = SessionClient(store)
    for session in ("approve-me", "deny-me"):
        await client.submit(session, "r1", {"text": "launch it, then report"})
    await client.submit("stuck", "r1", {"task": {"kind": "no-such-kind"}})
    script = Script.model_validate(APPROVAL_SCRIPT)
    async with serve(scripted_app(script, token="t")) as model_url:

        async def drive(session: str) -> DriveReport:
            settings = WorkerSettings(
                store_url=store.backend.description,
                session_id=session,
                plugins=("tests.support.agent_plugins:plugin",),
                model=ModelSettings(
                    base_url=f"{model_url}/v1", api_key=SecretStr("t"), model="m", stream=True
                ),
                approvals=(APPROVALS,),
            )
            return await run_worker(settings)

        for session in ("approve-me", "deny-me"):
            assert (await drive(session)).active
        stuck = await drive("stuck")  # no Brain runs that kind: what a router reports
        assert stuck.active and stuck.blocked
        await client.report_blocked("stuck", dict(stuck.blocked))
        fast = StreamSettings(retry=timedelta(milliseconds=300), idle_poll=timedelta(seconds=0.3))
        api = Restartable(create_app(store=store, wakes=None, token=SecretStr(TOKEN), streams=fast))
        await api.start()
        page = await log_in(chromium, api.url, TOKEN)
        try:
            await _filters(page, api.url)
            await page.goto(f"{api.url}/console/sessions/deny-me")
            await page.fill("tr.question input[name=why]", "not today")
            await page.click("tr.question button:has-text('Deny')")
            await expect(page.locator("p.notice")).to_contain_text("accepted")
            assert not (await drive("deny-me")).active
            await page.reload()
            denied = page.locator("li.entry.tool_result", has_text="denied")
            await expect(denied).to_contain_text("not today")

            await page.add_init_script(RECORD_COMMITS)
            await page.goto(f"{api.url}/console/sessions/approve-me")
            await expect(page.locator("#stream-state")).to_contain_text("live")
            await page.click("tr.question button:has-text('Approve')")
            await expect(page.locator("p.notice")).to_contain_text("accepted")
            await expect(page.locator("#stream-state")).to_contain_text("live")
            before = (await store.session("approve-me")).seq
            await expect(page.locator("#stream-state")).to_contain_text(f"seq {before}")
            await api.stop()
            await expect(page.locator("#stream-state")).to_contain_text("connection lost")

            driving = asyncio.create_task(drive("approve-me"))
            await _until_previewed(store, "approve-me")  # the call ran; text is streaming
            missed = (await store.session("approve-me")).seq - before
            assert missed >= 3, "the page is behind by the call's commits and a preview"
            await api.start()
            streaming = page.locator("section.previews pre")
            await expect(streaming).to_contain_text("w1 w2", timeout=15_000)
            await expect(page.locator("section.previews")).to_contain_text("preview")
            assert not (await driving).active
            answered = page.locator("tr[data-request='r1'] .pill.answered")
            await expect(answered).to_be_visible(timeout=15_000)
            await expect(page.locator("section.previews")).to_have_count(0)
            last = (await store.session("approve-me")).seq
            await expect(page.locator("#stream-state")).to_contain_text(f"seq {last}")
            seen: list[int] = await page.evaluate("window.seenCommits")
            assert seen == list(range(before + 1, last + 1)), "each commit once, in order"
            await page.screenshot(
                path=str(shots(tmp_path) / "console-approved.png"), full_page=True
            )
        finally:
            await page.close()
            await api.stop()
    await store.close()


async def _filters(page: Page, url: str) -> None:
    await page.goto(f"{url}/console/sessions?status=waiting_for_input")
    listed = page.locator("table.sessions tr.session")
    await expect(listed).to_have_count(2)
    await expect(page.locator("table.sessions")).to_contain_text("approve-me")
    await expect(page.locator("table.sessions")).to_contain_text("deny-me")
    await page.select_option("select[name=status]", "blocked")
    await page.click("form.filters button[type=submit]")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("stuck")


async def _until_previewed(store: SessionStore, session: str) -> None:
    async def previewed() -> bool:
        handle = await store.session(session)
        progress = handle.state.documents.get(PROGRESS_DOCUMENT)
        return progress is not None and bool(progress.body)

    await assert_eventually(previewed, within=20)
