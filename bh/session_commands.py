"""``bh submit | answer | approve | deny | questions | input-policy | budget | sessions |
show | watch | cancel``: sessions through the Session API.

The API is found by ``--api-url`` / ``BH_SESSION_API_URL`` and authenticated with
``--token`` / ``BH_SESSION_API_TOKEN`` (prefer the variable: options show in ``ps``).
Exit status 2 on an error (``code: message`` on stderr). ``watch`` follows the
session's event stream and reconnects after a dropped connection where it left off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Final, TypeVar

import typer
from pydantic import JsonValue, TypeAdapter, ValidationError
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from bh import terminal
from bh.api_client import print_json, run_client
from bh.session_client import (
    GIVE_UP_AFTER,
    SessionApiClient,
    StreamItem,
    merge,
    needs_refresh,
    with_preview,
)
from contracts import (
    BrainhandsError,
    Budget,
    Identifier,
    InputPolicy,
    NotFound,
    SubmissionStatus,
    TaskStatus,
)
from contracts.question import APPROVE, DENY
from contracts.workspace import WorkspaceRetention
from runtime.cancellation import cancel_and_wait
from session_api.views import (
    DEFAULT_CANCEL_REASON,
    AnswerRequest,
    OperationView,
    PreviewView,
    SessionStatus,
    SessionSummary,
    SessionView,
    SubmissionView,
    TaskView,
)

app = typer.Typer(help="Submit to sessions and watch them (Session API).", no_args_is_help=True)
console = terminal.console()
errors = terminal.console(stderr=True)

_T = TypeVar("_T")
#: A fresh view is read at most this often while watching.
_REFRESH_EVERY: Final = 0.5
_CELL: Final = 80

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api-url", envvar="BH_SESSION_API_URL", show_envvar=True, help="The Session API's URL."
    ),
]
ApiToken = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="BH_SESSION_API_TOKEN",
        show_envvar=True,
        show_default=False,
        help="The Session API token (prefer the variable).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _session_id(value: str) -> str:
    """A session id the API can take, or the reason it cannot (before anything is sent:
    an id with ``/`` would otherwise reach a different route)."""
    try:
        _SESSION_ID.validate_python(value)
    except ValidationError:
        raise typer.BadParameter(
            f"session id {value[:60]!r} is not allowed: use 1-200 of A-Z a-z 0-9 . _ : @ -, "
            "starting with a letter or digit"
        ) from None
    return value


_SESSION_ID: TypeAdapter[str] = TypeAdapter(Identifier)
SessionArg = Annotated[str, typer.Argument(help="The session's id.", callback=_session_id)]
Entries = Annotated[int, typer.Option(min=0, max=500, help="How many recent entries to show.")]
RequestIdOption = Annotated[
    str | None,
    typer.Option(help="Idempotency key: repeating it returns the original (default: a new uuid)."),
]


@app.command()
def submit(
    session_id: SessionArg,
    text: Annotated[
        str | None,
        typer.Argument(
            help="The input (a message for the session's agent); - reads it from stdin.",
            show_default=False,
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="Read the input from this file instead.", dir_okay=False, exists=True
        ),
    ] = None,
    request_id: RequestIdOption = None,
    json_input: Annotated[
        bool,
        typer.Option(
            "--json-input", help='TEXT is JSON input, e.g. {"task": {"kind": "k", "input": {}}}.'
        ),
    ] = False,
    conversation: Annotated[str, typer.Option(help="The conversation.")] = "main",
    policy: Annotated[
        InputPolicy | None,
        typer.Option(
            help="If the conversation's agent still runs: enqueue, interrupt or reject "
            "(default: the session's, else enqueue)."
        ),
    ] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Submit input to a session (once per request id) and print the submission."""
    text = _text_of(text, file)
    given = _json_input(text) if json_input else text
    if policy is not None:
        if json_input:
            raise typer.BadParameter("--policy goes with a text message, not --json-input")
        given = {"text": text, "policy": policy.value}
    rid = request_id or uuid.uuid4().hex
    submitted = run_client(
        SessionApiClient,
        api_url,
        token,
        lambda api: api.submit(session_id, given, request_id=rid, conversation_id=conversation),
    )
    if as_json:
        print_json(submitted)
        return
    sub = submitted.submission
    said = "submitted" if submitted.created else "already submitted: the original, no new work"
    console.print(f"{sub.request_id} {said} to {session_id} ({sub.status.value})", highlight=False)
    if sub.error is not None:
        errors.print(f"{sub.error.code}: {sub.error.message}", highlight=False)


def _text_of(text: str | None, file: Path | None) -> str:
    """The message: the argument, stdin for ``-``, or the file."""
    if (text is None) == (file is None):
        raise typer.BadParameter("give the input as TEXT (- for stdin) or --file PATH, once")
    if file is not None:
        return file.read_text(encoding="utf-8")
    return sys.stdin.read() if text == "-" else str(text)


@app.command()
def budget(
    session_id: SessionArg,
    tokens: Annotated[int | None, typer.Option(min=1, help="At most this many tokens.")] = None,
    cost: Annotated[float | None, typer.Option(min=0, help="At most this cost.")] = None,
    on_exceed: Annotated[
        str, typer.Option(help="ask (wait for approval to go on) or fail.")
    ] = "ask",
    clear: Annotated[bool, typer.Option("--clear", help="Remove the session's budget.")] = False,
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Bound a session's model use: when it is used up, the next model call waits for
    approval to go on for one more budget's worth (or fails)."""
    chosen = None
    if not clear:
        try:
            chosen = Budget.model_validate({"tokens": tokens, "cost": cost, "on_exceed": on_exceed})
        except ValueError as error:  # pydantic's ValidationError is one
            raise typer.BadParameter(str(error).splitlines()[-1]) from None
    run_client(SessionApiClient, api_url, token, lambda api: api.set_budget(session_id, chosen))
    said = "no budget" if chosen is None else chosen.model_dump_json(exclude_none=True)
    console.print(f"{session_id}: {said}", highlight=False)


@app.command("input-policy")
def input_policy(
    session_id: SessionArg,
    policy: Annotated[
        InputPolicy, typer.Argument(help="enqueue (the default), interrupt or reject.")
    ],
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Set what a session does with a message that arrives while its agent still runs."""
    run_client(
        SessionApiClient, api_url, token, lambda api: api.set_input_policy(session_id, policy)
    )
    console.print(f"{session_id}: messages while its agent runs: {policy.value}", highlight=False)


#: ``--by`` of ``bh answer | approve | deny``
BY_HELP = (
    "A name to record beside the token's (unverified): the answer is recorded as given "
    "by the token's name."
)


@app.command()
def answer(
    session_id: SessionArg,
    question_id: Annotated[str, typer.Argument(help="The open question's id (bh show).")],
    value: Annotated[str, typer.Argument(help="The answer (text, or JSON with --json-value).")],
    json_value: Annotated[
        bool, typer.Option("--json-value", help="VALUE is JSON (for a json question).")
    ] = False,
    by: Annotated[str | None, typer.Option(help=BY_HELP)] = None,
    why: Annotated[str | None, typer.Option(help="Why (recorded with the answer).")] = None,
    request_id: RequestIdOption = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Answer an open question of a waiting task (the first accepted answer wins)."""
    given = _json_input(value) if json_value else value
    _answer(session_id, question_id, given, by, why, request_id, api_url, token, as_json)


def _decision(value: str, help_: str) -> Callable[..., None]:
    """``bh approve`` / ``bh deny``: answer an approval question with ``value``."""

    def decide(
        session_id: SessionArg,
        question_id: Annotated[str, typer.Argument(help="The approval's question id.")],
        why: Annotated[str | None, typer.Option(help="Why (recorded; the model reads it).")] = None,
        by: Annotated[str | None, typer.Option(help=BY_HELP)] = None,
        request_id: RequestIdOption = None,
        api_url: ApiUrl = None,
        token: ApiToken = None,
        as_json: Json = False,
    ) -> None:
        _answer(session_id, question_id, value, by, why, request_id, api_url, token, as_json)

    decide.__doc__ = help_
    return decide


app.command("approve")(
    _decision(APPROVE, "Approve a tool call waiting for approval: it is dispatched then.")
)
app.command("deny")(
    _decision(DENY, "Deny a tool call waiting for approval: it never runs; the model is told why.")
)


def _answer(
    session_id: str,
    question_id: str,
    value: JsonValue,
    by: str | None,
    why: str | None,
    request_id: str | None,
    api_url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    body = AnswerRequest(
        request_id=request_id or uuid.uuid4().hex,
        question_id=question_id,
        value=value,
        by=by,
        why=why,
    )
    answered = run_client(
        SessionApiClient, api_url, token, lambda api: api.answer(session_id, body)
    )
    if as_json:
        print_json(answered)
        return
    sub = answered.submission
    said = "accepted" if answered.created else "already given: the original"
    console.print(
        f"answer {sub.request_id} to {question_id} {said} ({sub.status.value})", highlight=False
    )


@app.command()
def questions(
    queue: Annotated[str | None, typer.Option(help="Only this queue (say, approvals).")] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """The open questions and approvals of the active sessions, oldest first."""
    found = run_client(SessionApiClient, api_url, token, lambda api: api.questions(queue=queue))
    if as_json:
        print_json(found)
        return
    table = Table(title="waiting for input", title_justify="left")
    for column in ("session", "question", "kind", "queue", "asks"):
        table.add_column(column, overflow="fold")
    for item in found.questions:
        question = item.question
        table.add_row(
            item.session_id, question.id, question.kind.value, question.queue, Text(question.prompt)
        )
    console.print(table)
    if found.truncated:
        errors.print("[yellow]more sessions are active than were read[/]")


@app.command()
def sessions(
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many.")] = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Every session, finished ones too, by id (page on with --after)."
        ),
    ] = False,
    status: Annotated[
        SessionStatus | None, typer.Option(help="Only sessions in this state.")
    ] = None,
    prefix: Annotated[str, typer.Option(help="Only sessions whose id begins so.")] = "",
    kind: Annotated[
        str | None, typer.Option(help="Only sessions with a root task of this kind.")
    ] = None,
    after: Annotated[
        str | None, typer.Option(help="The session id the last page ended at.")
    ] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """List the sessions that have work left, or with --all every session; pages go
    by id (--after), active ones shown newest first within a page."""
    found = run_client(
        SessionApiClient,
        api_url,
        token,
        lambda api: api.sessions(
            limit=limit,
            every=every,
            status=None if status is None else status.value,
            prefix=prefix,
            after=after,
            kind=kind,
        ),
    )
    if as_json:
        print_json(found)
        return
    if not found.sessions:
        narrowed = every or status or prefix or kind
        shown = "no session matches" if narrowed else "no session has work left"
        hint = "" if every else " Finished sessions are listed with --all."
        console.print(f"{shown}.{hint}", highlight=False)
        return
    console.print(sessions_table(found.sessions))
    if found.next_after is not None:
        again = "--all --after" if every else "--after"
        errors.print(f"[yellow]more sessions[/]: the next page is {again} {found.next_after}")
    elif found.truncated:
        errors.print("[yellow]more sessions match[/]: narrow the filters or raise --limit")


@app.command()
def show(
    session_id: SessionArg,
    entries: Entries = 10,
    at: Annotated[
        int | None,
        typer.Option(min=1, help="The session as it was right after this commit (seq)."),
    ] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Show a session: its task tree, operations, submissions and recent entries (as it
    is, or as it was after commit --at; operations are always as they are now)."""
    view = run_client(
        SessionApiClient,
        api_url,
        token,
        lambda api: api.session(session_id, entries=entries, at=at),
    )
    if as_json:
        print_json(view)
        return
    console.print(render(view))


@app.command()
def fork(
    session_id: SessionArg,
    at: Annotated[int, typer.Option(min=1, help="The commit (seq) to fork after.")],
    into: Annotated[str, typer.Option(help="The new session's id.")],
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Start a new session as this one was right after commit --at (its history is
    referred to, not copied; this session is untouched). The fork goes on as it was;
    submit to it to give it a new message. External actions that already happened are
    not undone."""
    forked = run_client(
        SessionApiClient, api_url, token, lambda api: api.fork(session_id, at=at, into=into)
    )
    if as_json:
        print_json(forked)
        return
    state = "active: a Brain takes it from here" if forked.active else "idle"
    console.print(
        f"forked {forked.origin} at commit {forked.at} into {forked.session_id} "
        f"(seq {forked.seq}, {state})",
        highlight=False,
    )
    console.print(Text(f"note: {forked.note}", style="yellow"))


@app.command()
def watch(
    session_id: SessionArg,
    until_done: Annotated[
        bool, typer.Option("--until-done", help="Exit once no submission is open.")
    ] = False,
    entries: Entries = 10,
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Follow a session live (task tree, operations, last entries) until interrupted."""

    async def body(api: SessionApiClient) -> None:
        with Live(console=console, auto_refresh=False) as live:
            await Watcher(api, session_id, entries=entries, until_done=until_done).run(live)

    with contextlib.suppress(KeyboardInterrupt):
        run_client(SessionApiClient, api_url, token, body)


@app.command()
def cancel(
    session_id: SessionArg,
    request_id: Annotated[str | None, typer.Option(help="The submission to cancel.")] = None,
    task_id: Annotated[str | None, typer.Option(help="Or: one task to cancel.")] = None,
    reason: Annotated[str, typer.Option(help="Why (recorded).")] = DEFAULT_CANCEL_REASON,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Ask for a submission (or one task) to be cancelled; the session's Brain acts on it."""
    accepted = run_client(
        SessionApiClient,
        api_url,
        token,
        lambda api: api.cancel(session_id, request_id=request_id, task_id=task_id, reason=reason),
    )
    if as_json:
        print_json(accepted)
        return
    target = accepted.request_id or accepted.task_id
    if accepted.recorded:
        said = "cancellation recorded"
    elif accepted.status in _FINAL:
        said = "already final: nothing to cancel"
    else:
        said = "cancellation was already recorded"
    console.print(f"{target}: {said} ({accepted.status})", highlight=False)


class Watcher:
    """Keeps a view of the session current from its event stream and redraws it; reads
    a fresh view (debounced) when a commit touched operations or the control document."""

    def __init__(
        self, api: SessionApiClient, session_id: str, *, entries: int, until_done: bool
    ) -> None:
        self.api = api
        self.session_id = session_id
        self.entries = entries
        self.until_done = until_done
        self.view: SessionView | None = None
        self._stale = False
        self._refreshed = 0.0
        #: why the stream is down, while it reconnects (shown above the view)
        self.lost: str | None = None
        self._queue: asyncio.Queue[StreamItem | BaseException | None] = asyncio.Queue()

    async def run(self, live: Live) -> None:
        queue = self._queue
        reader = asyncio.create_task(self._read(queue))
        try:
            while not self.done:
                timeout = None if not self._stale else self._refresh_in()
                try:
                    item = await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    await self._refresh()
                else:
                    if isinstance(item, BaseException):
                        raise item
                    if item is not None:  # None: only redraw (the stream is down)
                        self._take(item)
                if self._stale and self._refresh_in() == 0:
                    await self._refresh()
                if self.view is not None:
                    live.update(self._shown(self.view), refresh=True)
        finally:
            await cancel_and_wait(reader)

    @property
    def done(self) -> bool:
        view = self.view
        if not self.until_done or view is None or view.seq == 0:
            return False
        open_ = any(not sub.status.is_final for sub in view.submissions)
        return not open_ and (bool(view.submissions) or not view.active)

    def _shown(self, view: SessionView) -> RenderableType:
        if self.lost is None:
            return render(view)
        return Group(Text(self.lost, style="bold red"), render(view))

    def _retrying(self, failures: int, error: BrainhandsError) -> None:
        self.lost = (
            f"connection to the Session API lost ({error.message[:120]}); reconnecting, "
            f"attempt {failures} of {GIVE_UP_AFTER} — what is shown may be out of date"
        )
        self._queue.put_nowait(None)

    async def _read(self, queue: asyncio.Queue[StreamItem | BaseException | None]) -> None:
        try:
            stream = self.api.follow(self.session_id, entries=self.entries, on_retry=self._retrying)
            async with contextlib.aclosing(stream) as items:
                async for item in items:
                    queue.put_nowait(item)
        except BrainhandsError as error:
            queue.put_nowait(error)

    def _take(self, item: StreamItem) -> None:
        self.lost = None
        if isinstance(item, SessionView) and item.seq == 0 and self.view is None:
            raise NotFound(
                f"session {self.session_id!r} has no commits: there is nothing to watch "
                "(check the id, or submit to it first)",
                session_id=self.session_id,
            )
        if isinstance(item, SessionView):
            self.view = item
        elif isinstance(item, PreviewView):
            if self.view is not None:
                self.view = with_preview(self.view, item)
        elif self.view is not None:
            self.view = merge(self.view, item, keep_entries=self.entries)
            self._stale = self._stale or needs_refresh(item)

    def _refresh_in(self) -> float:
        return max(0.0, self._refreshed + _REFRESH_EVERY - time.monotonic())

    async def _refresh(self) -> None:
        self._stale, self._refreshed = False, time.monotonic()
        fresh = await self.api.session(self.session_id, entries=self.entries)
        if self.view is None or fresh.seq >= self.view.seq:
            self.view = fresh


# -- rendering ------------------------------------------------------------------------


#: characters of a preview ``bh watch`` shows (its end: what arrived last)
PREVIEW_TAIL = 400


def preview_text(preview: PreviewView) -> Text:
    """A running task's streamed text, marked as a preview (not an answer)."""
    cut = ", cut" if preview.truncated else ""
    if preview.kind == "tool_output":
        what = f"log of {preview.operation_id} ({preview.chars} bytes{cut}, so far)"
    else:
        what = f"preview of {preview.task_id} ({preview.chars} chars{cut}, not an answer)"
    text = Text(f"{what}: ")
    text.stylize("bold yellow")
    shown = preview.text[-PREVIEW_TAIL:]
    text.append(("…" if len(preview.text) > len(shown) else "") + shown, style="italic dim")
    return text


def render(view: SessionView) -> RenderableType:
    parts: list[RenderableType] = [_head(view), task_tree(view)]
    if view.blocked:
        blocked = Text("blocked: ", style="bold red")
        for item in view.blocked:
            blocked.append(f"{item.task_id} ({item.reason})  ")
        parts.append(blocked)
    if view.questions:
        parts.append(questions_table(view))
    parts.extend(preview_text(preview) for preview in view.previews)
    if view.operations:
        parts.append(operations_table(view.operations, view.operations_total))
    parts.append(submissions_table(view.submissions))
    if view.entries:
        parts.append(entries_table(view))
    return Group(*parts)


def task_tree(view: SessionView) -> Tree:
    tree = Tree(Text(f"tasks of {view.session_id}", style="bold"))
    known = {task.id for task in view.tasks}
    children: dict[str | None, list[TaskView]] = {}
    for task in view.tasks:
        parent = task.parent_id if task.parent_id in known else None
        children.setdefault(parent, []).append(task)

    def add(node: Tree, parent: str | None) -> None:
        for task in children.get(parent, []):
            add(node.add(task_label(task)), task.id)

    add(tree, None)
    if not view.tasks:
        tree.add(Text("(no open or recent tasks)", style="dim"))
    return tree


def task_label(task: TaskView) -> Text:
    label = Text.assemble((task.id, "bold"), f" {task.kind}@{task.version} ")
    label.append(_status(task), style=_STYLE.get(task.outcome or task.status, ""))
    label.append(f" phase {task.phase}")
    if task.attempts > 1 or task.crashes:
        label.append(f" · attempt {task.attempts}, {task.crashes} crash(es)")
    if task.wait is not None and task.waiting_for_input and task.wait.question is not None:
        label.append(f" · waiting for input: {task.wait.question.id}", style="magenta")
    elif task.wait is not None:
        waits = [*task.wait.tasks, *task.wait.operations]
        label.append(f" · waits ({task.wait.join.value}) on {', '.join(waits)}")
    if task.sleep_until is not None:
        label.append(f" · sleeps until {task.sleep_until:%Y-%m-%d %H:%M:%S}")
    if task.parked is not None:
        label.append(f" · parked: {task.parked.reason}", style="yellow")
    if task.blocked:
        label.append(f" · blocked: {task.blocked}", style="red")
    if task.cancel_requested and task.status is not TaskStatus.TERMINAL:
        label.append(" · cancel requested", style="yellow")
    if task.error is not None:
        label.append(f" · {task.error.code}: {_short(task.error.message)}", style="red")
    elif task.outcome is not None and task.result is not None:
        label.append(f" → {_short(task.result)}")
    return label


def questions_table(view: SessionView) -> Table:
    """Open questions: answer with ``bh answer`` (approvals: ``bh approve | deny``)."""
    table = Table(title="waiting for input", title_justify="left")
    for column in ("question", "task", "kind", "queue", "asks", "deadline"):
        table.add_column(column, overflow="fold")
    for open_ in view.questions:
        question = open_.question
        asks = question.prompt
        if question.call is not None and question.call.tool not in asks:
            asks += f" [{question.call.tool} {_short(question.call.arguments)}]"
        elif question.choices:
            asks += f" [{' | '.join(question.choices)}]"
        deadline = "" if question.deadline is None else f"{question.deadline:%Y-%m-%d %H:%M:%S}"
        if deadline:
            deadline += f" then {question.on_deadline.value}"
        table.add_row(
            question.id, open_.task_id, question.kind.value, question.queue, Text(asks), deadline
        )
    return table


def operations_table(operations: list[OperationView], total: int) -> Table:
    shown = "" if total == len(operations) else f" ({len(operations)} of {total})"
    table = Table(title=f"operations{shown}", title_justify="left")
    for column in ("operation", "task", "tool", "status", "attempts", "result", "applied"):
        table.add_column(column, overflow="fold")
    for op in operations:
        tool = op.tool if op.tool_version is None else f"{op.tool}@{op.tool_version}"
        result = ""
        if op.result is not None:
            result = "succeeded" if op.result.succeeded else "failed"
            if op.result.termination:
                result += f" ({op.result.termination})"
        elif op.reason:
            result = op.reason
        if op.decided_by:
            result += f" — decided by {op.decided_by}: {op.decision}"
        table.add_row(
            op.operation_id,
            op.task_id or "",
            tool,
            op.status.value,
            str(op.attempts),
            result,
            "yes" if op.applied else "",
        )
    return table


def submissions_table(submissions: list[SubmissionView]) -> Table:
    table = Table(title="submissions", title_justify="left")
    for column in ("request", "status", "task", "taken in", "answer"):
        table.add_column(column, overflow="fold")
    for sub in submissions:
        answer = f"{sub.error.code}: {sub.error.message}" if sub.error else _short(sub.answer)
        handling = sub.handling.value if sub.handling else ""
        table.add_row(sub.request_id, sub.status.value, sub.task_id or "", handling, answer)
    return table


def entries_table(view: SessionView) -> Table:
    table = Table(title=f"last entries (of {view.entry_count})", title_justify="left")
    for column in ("#", "kind", "task", "text"):
        table.add_column(column, overflow="fold")
    for entry in view.entries:
        index = "" if entry.index is None else str(entry.index)
        table.add_row(index, entry.kind.value, entry.task_id or "", entry.text)
    return table


def sessions_table(found: list[SessionSummary]) -> Table:
    table = Table(title="sessions")
    columns = (
        "session",
        "state",
        "seq",
        "holder",
        "open tasks",
        "open submissions",
        "input",
        "blocked",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    table.add_column("updated")
    for s in found:
        updated = f"{s.updated_at:%Y-%m-%d %H:%M:%S}" if s.updated_at else (s.problem or "")
        table.add_row(
            s.session_id,
            "active" if s.active else "finished",
            str(s.seq),
            s.holder or "",
            str(s.open_tasks),
            str(s.open_submissions),
            str(s.waiting_for_input) if s.waiting_for_input else "",
            str(s.blocked) if s.blocked else "",
            updated,
        )
    return table


_FINAL: Final = frozenset(
    {*(s.value for s in SubmissionStatus if s.is_final), "succeeded", "failed", "cancelled"}
)
_STYLE: Final = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "running": "cyan",
    "waiting": "blue",
    "sleeping": "blue",
}


def _head(view: SessionView) -> Text:
    holder = f" (holder {view.holder})" if view.holder else ""
    state = "active" if view.active else "finished"
    head = Text.assemble(
        ("session ", "bold"),
        (view.session_id, "bold"),
        f" · seq {view.seq} · fence {view.fence}{holder} · ",
        (state, "green" if view.active else "dim"),
    )
    used = view.usage.total
    if used.calls:
        head.append(
            f" · {used.calls} model calls, {used.input_tokens:,} in / "
            f"{used.output_tokens:,} out tokens, cost {used.cost:.4f}"
        )
    if view.budget is not None:
        head.append(f" · budget {view.budget.model_dump_json(exclude_none=True)}")
    if view.retention != WorkspaceRetention():  # the default goes without saying
        head.append(f" · keeps {view.retention.keep_versions} workspace versions")
    return head


def _status(task: TaskView) -> str:
    if task.outcome is not None:
        return task.outcome.value if task.status is TaskStatus.TERMINAL else "completing"
    return task.status.value


def _short(value: object) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def _json_input(text: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(text)
    except ValueError as error:
        raise typer.BadParameter(f"TEXT is not JSON: {error}") from None
    return value
