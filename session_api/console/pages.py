"""The console's pages and actions (``/console``): each page reads through the same
functions as the API's routes, and each action is the API's own (cancel, answer,
settle, fork), behind the caller's grant and the form's CSRF token."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final, NamedTuple
from urllib.parse import quote, urlencode, urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from pydantic import ValidationError

from contracts import (
    BrainhandsError,
    Identifier,
    InvalidInput,
    NotFound,
    Operation,
    OperationResult,
    SettleRequest,
)
from contracts.errors import Forbidden
from contracts.fleet import HandsBeat, QueueBacklog, SchedulerBeat
from coordination.incarnations import BrainBeat
from session_api.console.graph import task_rows
from session_api.console.login import (
    COOKIE,
    LOGIN_COOKIE,
    LOGIN_FORM_SECONDS,
    check_form,
    check_login_form,
    csrf_token,
    login_csrf,
    login_grant,
    read_form,
)
from session_api.console.timeline import timeline
from session_api.console.workspace import workspace_pages
from session_api.context import ApiContext
from session_api.describe import session_view
from session_api.listing import Listing
from session_api.metrics import Backlog
from session_api.sessions import answer_question, cancel_work, fork_session, settle_operation
from session_api.views import AnswerRequest, CancelRequest, ForkRequest, SessionStatus
from webapi.auth import Access, Grant, grant_of
from webapi.scopes import check_session, needs

HERE: Final = Path(__file__).parent
#: commits on one page of a session's timeline
TIMELINE_PAGE: Final = 50
#: sessions on one page of the list
LIST_PAGE: Final = 50
#: entries shown on a session's page
ENTRIES: Final = 30
#: how much of an operation's output a page shows
OUTPUT_CHARS: Final = 20_000
_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True),
    undefined=StrictUndefined,  # a misspelt field fails the page (and its tests), not blank
    trim_blocks=True,
    lstrip_blocks=True,
)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


_templates.filters["json"] = _json
_templates.filters["url"] = lambda value: quote(str(value), safe="")
_templates.filters["time"] = lambda value: "" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def _page(template: str, request: Request, grant: Grant, **values: Any) -> HTMLResponse:
    body = _templates.get_template(template).render(
        grant=grant, csrf=csrf_token(grant), notice=request.query_params.get("notice"), **values
    )
    return HTMLResponse(body, headers=_HEADERS)


def _login_page(problem: str | None, *, secure: bool, status: int = 200) -> HTMLResponse:
    """The login form, with a fresh CSRF token in its field and in its cookie."""
    csrf = login_csrf()
    body = _templates.get_template("login.html").render(
        problem=problem, grant=None, notice=None, csrf=csrf
    )
    response = HTMLResponse(body, status_code=status, headers=_HEADERS)
    response.set_cookie(
        LOGIN_COOKIE,
        csrf,
        max_age=LOGIN_FORM_SECONDS,
        path=COOKIE.login,
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    return response


def _reader(request: Request) -> Grant:
    grant = grant_of(request.scope)
    if not grant.may(Access.READ):
        raise InvalidInput("this token cannot read")
    return grant


def _back(url: str, notice: str) -> RedirectResponse:
    return RedirectResponse(f"{url}?{urlencode({'notice': notice})}", 303)


class StreamRow(NamedTuple):
    """One stream's backlog on the fleet page, from the freshest beat that read it."""

    stream: str
    what: str
    queue: QueueBacklog | None
    read_by: str | None
    read_at: datetime | None


def _streams(hands: list[HandsBeat], schedulers: list[SchedulerBeat]) -> list[StreamRow]:
    readings = [(h.beat_at, h.executor, h.queue) for h in hands]
    readings += [(s.beat_at, s.scheduler, s.dispatch) for s in schedulers]
    results = [(s.beat_at, s.scheduler, s.results) for s in schedulers]
    rows = []
    for stream, what, read in (
        ("dispatch", "tool calls waiting for a Hands", readings),
        ("results", "tool results waiting to become wakes (the schedulers' work)", results),
    ):
        found = max((r for r in read if r[2] is not None), key=lambda r: r[0], default=None)
        if found is None:
            rows.append(StreamRow(stream, what, None, None, None))
        else:
            rows.append(StreamRow(stream, what, found[2], found[1], found[0]))
    return rows


#: reads the Brains' beats (``coordination.incarnations.brains``)
Brains = Callable[[], Awaitable[list[BrainBeat]]]


def console_router(
    context: ApiContext,
    grants: Sequence[Grant],
    backlog: Backlog | None,
    brains: Brains | None = None,
    public_url: str | None = None,
) -> APIRouter:
    """The console's routes; ``public_url``: the origin browsers reach it at, when a
    proxy in front terminates TLS (its scheme decides the cookies' ``Secure``, and forms
    must come from it)."""
    router = APIRouter(prefix=COOKIE.prefix, include_in_schema=False)

    def secure(request: Request) -> bool:
        scheme = urlsplit(public_url).scheme if public_url else request.url.scheme
        return scheme == "https"

    @router.get("/login")
    async def login_form(request: Request) -> HTMLResponse:
        return _login_page(None, secure=secure(request))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await read_form(request)
        try:
            check_login_form(request, form, public_url)
        except Forbidden as refused:
            return _login_page(refused.message, secure=secure(request), status=403)
        grant = login_grant(grants, form.get("token", ""))
        if grant is None:
            return _login_page("That token is not valid.", secure=secure(request), status=401)
        response = RedirectResponse(f"{COOKIE.prefix}/sessions", 303)
        response.set_cookie(
            COOKIE.name,
            grant.token.get_secret_value(),
            httponly=True,
            samesite="strict",
            secure=secure(request),
            path="/",
        )
        response.delete_cookie(  # its form is spent
            LOGIN_COOKIE,
            path=COOKIE.login,
            secure=secure(request),
            httponly=True,
            samesite="strict",
        )
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        grant = grant_of(request.scope)
        check_form(request, await read_form(request), grant, public_url)
        response = RedirectResponse(COOKIE.login, 303)
        response.delete_cookie(
            COOKIE.name, path="/", secure=secure(request), httponly=True, samesite="strict"
        )
        return response

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        path = HERE / "static" / name
        if name not in {"console.css", "console.js"}:
            raise NotFound(f"no static file {name!r}")
        return FileResponse(path, headers={"X-Content-Type-Options": "nosniff"})

    @router.get("")
    async def home() -> RedirectResponse:
        return RedirectResponse(f"{COOKIE.prefix}/sessions", 303)

    @router.get("/sessions")
    async def sessions(
        request: Request,
        every: Annotated[bool, Query(alias="all")] = False,
        status: Annotated[str, Query(max_length=40)] = "",  # the form's "any" sends ""
        prefix: Annotated[str, Query(max_length=200)] = "",
        kind: Annotated[str, Query(max_length=200)] = "",
        after: Annotated[str | None, Query(max_length=200)] = None,
    ) -> HTMLResponse:
        grant = _reader(request)
        try:
            wanted = SessionStatus(status) if status else None
        except ValueError:
            raise InvalidInput(f"no session status {status!r}", field="status") from None
        listing = Listing(
            context.store,
            grant,
            limit=LIST_PAGE,
            status=wanted,
            prefix=prefix,
            kind=kind or None,
        )
        found = await (listing.every(after) if every else listing.active(after))
        return _page(
            "sessions.html",
            request,
            grant,
            found=found,
            exact=await _exact(prefix, found.sessions, grant),
            every=every,
            status=status,
            prefix=prefix,
            kind=kind,
            statuses=[s.value for s in SessionStatus],
        )

    async def _exact(typed: str, listed: Sequence[Any], grant: Grant) -> str | None:
        """The session whose id is exactly what was typed, when this page does not list
        it (finished, or past this page): an id pasted from a log or an alert."""
        if not typed or any(s.session_id == typed for s in listed) or not grant.covers(typed):
            return None
        try:
            handle = await context.store.session(typed)
        except BrainhandsError:
            return None
        return typed if handle.seq > 0 else None

    async def _session_values(session_id: str, grant: Grant, older: int | None) -> dict[str, Any]:
        check_session(grant, session_id)
        handle = await context.store.session(session_id)
        if handle.seq == 0:
            raise NotFound(f"session {session_id!r} has no commits", session_id=session_id)
        view = await session_view(context.store, handle, entries=ENTRIES)
        end = min(older or handle.seq + 1, handle.seq + 1)
        start = max(0, end - 1 - TIMELINE_PAGE)
        records = await context.store.commits(session_id, after=start, limit=end - 1 - start)
        earlier = max(0, start - TIMELINE_PAGE)
        before = []
        if start > 0:  # who wrote last before this page: a takeover on its first claim shows
            before = await context.store.commits(session_id, after=earlier, limit=start - earlier)
        return {
            "view": view,
            "rows": task_rows(view.tasks),
            "documents": sorted(handle.state.documents.values(), key=lambda d: d.name),
            "timeline": list(reversed(timeline(records, before))),
            "older": start + 1 if start > 0 else None,
            "newer": end + TIMELINE_PAGE if end <= handle.seq else None,
            "paged": older is not None,
            "may_operate": grant.may(Access.OPERATE),
        }

    @router.get("/sessions/{session_id}")
    async def session(
        request: Request, session_id: Identifier, older: Annotated[int | None, Query(ge=1)] = None
    ) -> HTMLResponse:
        grant = _reader(request)
        values = await _session_values(session_id, grant, older)
        return _page("session.html", request, grant, **values)

    @router.get("/sessions/{session_id}/live")
    async def session_live(
        request: Request, session_id: Identifier, older: Annotated[int | None, Query(ge=1)] = None
    ) -> HTMLResponse:
        grant = _reader(request)
        values = await _session_values(session_id, grant, older)
        return _page("live.html", request, grant, **values)

    async def _operation(request: Request, operation_id: str) -> tuple[Grant, Operation]:
        grant = _reader(request)
        record = await context.store.get_operation(operation_id)
        if record is None or not grant.covers(record.session_id):
            raise NotFound(f"no operation {operation_id!r}", operation_id=operation_id)
        return grant, record

    async def _result(operation_id: str) -> tuple[OperationResult, str] | None:
        """The result and its whole output as text (its blob, or the inline JSON)."""
        result = await context.store.get_operation_result(operation_id)
        if result is None:
            return None
        if result.blob is not None:
            data = await context.store.get_blob(result.blob)
            return result, data.decode("utf-8", "replace")
        output = result.output
        return result, output if isinstance(output, str) else _json(output)

    async def _finished(request: Request, operation_id: str) -> tuple[OperationResult, str]:
        await _operation(request, operation_id)
        found = await _result(operation_id)
        if found is None:
            raise NotFound(f"operation {operation_id!r} has no result yet")
        return found

    @router.get("/operations/{operation_id}")
    async def operation(request: Request, operation_id: Identifier) -> HTMLResponse:
        grant, record = await _operation(request, operation_id)
        result, output = await _result(operation_id) or (None, "")
        return _page(
            "operation.html",
            request,
            grant,
            op=record,
            result=result,
            output=output[:OUTPUT_CHARS],
            cut=len(output) > OUTPUT_CHARS,
            may_operate=grant.may(Access.OPERATE),
        )

    @router.get("/operations/{operation_id}/output")
    async def operation_output(request: Request, operation_id: Identifier) -> PlainTextResponse:
        """The whole output the result holds."""
        _, output = await _finished(request, operation_id)
        return PlainTextResponse(output, headers=_HEADERS)

    @router.get("/operations/{operation_id}/log")
    async def operation_log(request: Request, operation_id: Identifier) -> PlainTextResponse:
        """The end of the run's log, as much as the Hands kept (``log_tail_bytes``)."""
        result, _ = await _finished(request, operation_id)
        return PlainTextResponse(result.log_tail, headers=_HEADERS)

    @router.get("/fleet")
    async def fleet(
        request: Request, grant: Annotated[Grant, needs(Access.READ, deployment=True)]
    ) -> HTMLResponse:
        """The deployment's routes, Brains, Hands (hosts, pids) and backlogs: for an
        unrestricted token only (as ``/metrics``); a tenant's token gets 403."""
        routes: list[Any] = []
        beats: list[BrainBeat] = []
        problem = None
        if backlog is None or brains is None:
            problem = "this Session API has no wake queue (no Redis): no routes to show"
        else:
            try:
                routes, beats = await asyncio.gather(backlog(), brains())
            except Exception as error:  # the page says so; the log has the rest
                problem = f"Redis could not be read: {type(error).__name__}"
        hands: list[HandsBeat] = []
        schedulers: list[SchedulerBeat] = []
        hands_problem = None
        try:
            hands, schedulers = await asyncio.gather(
                context.store.fleet.hands(), context.store.fleet.schedulers.listed()
            )
        except BrainhandsError as error:
            hands_problem = f"the store could not be read: {error.message}"
        return _page(
            "fleet.html",
            request,
            grant,
            routes=routes,
            brains=beats,
            problem=problem,
            hands=hands,
            schedulers=schedulers,
            covered={
                h.executor: [op for op in h.running if grant.covers(op.session_id)] for h in hands
            },
            hands_problem=hands_problem,
            streams=_streams(hands, schedulers),
            # beats are stamped on the store's clock: aged on it, never this host's
            utcnow=context.store.clock.now(),
        )

    # -- actions: the API's own, from a form ------------------------------------------

    async def _act(request: Request, session_id: str) -> tuple[Grant, dict[str, str]]:
        grant = grant_of(request.scope)
        form = await read_form(request)
        check_form(request, form, grant, public_url)
        if not grant.may(Access.OPERATE):
            raise InvalidInput(f"the token {grant.name!r} may only read")
        check_session(grant, session_id)
        return grant, form

    def _here(session_id: str) -> str:
        return f"{COOKIE.prefix}/sessions/{quote(session_id, safe='')}"

    @router.post("/sessions/{session_id}/cancel")
    async def cancel(request: Request, session_id: Identifier) -> RedirectResponse:
        _, form = await _act(request, session_id)
        try:
            body = CancelRequest(
                request_id=form.get("request_id") or None,
                task_id=form.get("task_id") or None,
                reason=form.get("reason") or "cancelled from the console",
            )
        except ValidationError as error:
            raise InvalidInput(f"cancel: {error.errors()[0]['msg']}") from None
        accepted, final = await cancel_work(context, session_id, body)
        target = accepted.task_id or accepted.request_id
        said = (
            f"{target} was already {accepted.status}" if final else f"cancel of {target} recorded"
        )
        return _back(_here(session_id), said)

    @router.post("/sessions/{session_id}/answer")
    async def answer(request: Request, session_id: Identifier) -> RedirectResponse:
        grant, form = await _act(request, session_id)
        body = AnswerRequest(
            request_id=f"console-{uuid.uuid4().hex[:12]}",
            question_id=form.get("question_id", ""),
            value=form.get("value", ""),
            why=form.get("why") or None,
        )
        submission, _ = await answer_question(context, session_id, body, grant.name)
        return _back(_here(session_id), f"answer {submission.request_id} {submission.status.value}")

    @router.post("/operations/{operation_id}/settle")
    async def settle(request: Request, operation_id: Identifier) -> RedirectResponse:
        _, record = await _operation(request, operation_id)
        grant, form = await _act(request, record.session_id)
        try:
            text = form.get("output", "").strip()
            body = SettleRequest(
                outcome=form.get("outcome", ""),
                output=json.loads(text) if text else None,
                reason=form.get("reason", ""),
            )
        except json.JSONDecodeError as error:
            raise InvalidInput(f"settle: the output is not JSON ({error.msg})") from None
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise InvalidInput(f"settle: {where}: {problem['msg']}") from None
        settled = await settle_operation(context, record.session_id, operation_id, body, grant.name)
        here = f"{COOKIE.prefix}/operations/{quote(operation_id, safe='')}"
        return _back(here, f"settled as {settled.status.value} by {grant.name}")

    @router.post("/sessions/{session_id}/fork")
    async def fork(request: Request, session_id: Identifier) -> RedirectResponse:
        grant, form = await _act(request, session_id)
        try:
            body = ForkRequest(at=int(form.get("at", "0")), into=form.get("into", ""))
        except (ValueError, ValidationError):
            raise InvalidInput("fork: give a commit number and a new session id") from None
        check_session(grant, body.into)
        handle, _ = await fork_session(context, session_id, body)
        if handle.state.is_active:
            await context.wake(body.into, "fork")
        return _back(_here(body.into), f"forked from {session_id} at commit {body.at}")

    router.include_router(workspace_pages(context, _page, _reader))  # the Workspace tab
    return router
