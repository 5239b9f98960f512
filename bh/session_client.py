"""A small typed async client of the Session HTTP API (``docs/session-api.md``).

``async with SessionApiClient(url, token) as api: await api.submit("s1", "hello",
request_id="r1")``. Error answers come back as the project's errors, rebuilt from their
stable codes (``BrainhandsError.from_info``): ``NotFound``, ``InvalidInput``...; a 401 is
``Unauthorized``; an unreachable API is ``StoreUnavailable`` (retryable).

``events`` reads one connection of a session's event stream; ``follow`` reconnects
after a dropped connection with ``Last-Event-ID``, so it yields every commit once.
``merge`` keeps a ``SessionView`` current with the ``CommitEvent``s that follow it.
A session's workspace and artifacts are read with ``bh.workspace_client``'s methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import aclosing
from typing import Any, Final, TypeVar

import httpx
from pydantic import BaseModel, JsonValue, SecretStr, ValidationError

from bh.api_client import error_of
from bh.workspace_client import WorkspaceClient
from contracts import (
    CONTROL_DOCUMENT,
    BrainhandsError,
    Budget,
    ErrorInfo,
    InputPolicy,
    StoreUnavailable,
    TaskStatus,
)
from contracts.model import Frozen
from contracts.workspace import WorkspaceRetention
from session_api.views import (
    COMMIT_EVENT,
    ERROR_EVENT,
    PREVIEW_EVENT,
    VIEW_EVENT,
    AnswerRequest,
    BudgetRequest,
    CancelAccepted,
    CancelRequest,
    CommitEvent,
    EntryView,
    ForkRequest,
    ForkView,
    Inbox,
    InputPolicyRequest,
    OutboxView,
    PreviewView,
    QuestionView,
    RetentionRequest,
    SessionList,
    SessionView,
    SubmissionView,
    SubmitRequest,
    TaskView,
)

_M = TypeVar("_M", bound=BaseModel)

#: What a session's event stream yields: the view it starts from, then commits.
StreamItem = SessionView | CommitEvent | PreviewView

#: Consecutive failed connections after which ``follow`` gives up.
GIVE_UP_AFTER: Final = 10


class Submitted(Frozen):
    """A submission, and whether this request created it (else: the original, returned
    for a request id submitted before)."""

    submission: SubmissionView
    created: bool


class SessionApiClient(WorkspaceClient):
    what = "Session API"
    url_variable = "BH_SESSION_API_URL"
    token_variable = "BH_SESSION_API_TOKEN"

    def __init__(
        self,
        base_url: str,
        token: str | SecretStr,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 45.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``stream_timeout``: a stream silent this long (no event, no keepalive) counts
        as dropped; the server sends a keepalive every 15 s."""
        super().__init__(base_url, token, timeout=timeout, transport=transport)
        self._stream_timeout = httpx.Timeout(timeout, read=stream_timeout)

    async def submit(
        self,
        session_id: str,
        input: JsonValue,
        *,
        request_id: str,
        conversation_id: str = "main",
    ) -> Submitted:
        """Submit ``input`` once per ``request_id`` (resubmitting returns the original)."""
        body = SubmitRequest(request_id=request_id, input=input, conversation_id=conversation_id)
        response = await self._request(
            "POST", f"/v1/sessions/{session_id}/submissions", json=body.model_dump(mode="json")
        )
        return Submitted(
            submission=self._parse(SubmissionView, response), created=response.status_code == 201
        )

    async def answer(self, session_id: str, body: AnswerRequest) -> Submitted:
        """Answer an open question once per request id (a repeat returns the original)."""
        response = await self._request(
            "POST", f"/v1/sessions/{session_id}/inputs", json=body.model_dump(mode="json")
        )
        return Submitted(
            submission=self._parse(SubmissionView, response), created=response.status_code == 201
        )

    async def set_input_policy(self, session_id: str, policy: InputPolicy | None) -> None:
        body = InputPolicyRequest(policy=policy)
        await self._request(
            "PUT", f"/v1/sessions/{session_id}/input-policy", json=body.model_dump(mode="json")
        )

    async def set_budget(self, session_id: str, budget: Budget | None) -> None:
        body = BudgetRequest(budget=budget)
        await self._request(
            "PUT", f"/v1/sessions/{session_id}/budget", json=body.model_dump(mode="json")
        )

    async def set_retention(self, session_id: str, retention: WorkspaceRetention | None) -> None:
        body = RetentionRequest(retention=retention)
        await self._request(
            "PUT", f"/v1/sessions/{session_id}/retention", json=body.model_dump(mode="json")
        )

    async def questions(self, *, queue: str | None = None) -> Inbox:
        params = {} if queue is None else {"queue": queue}
        return self._parse(Inbox, await self._request("GET", "/v1/questions", params=params))

    async def sessions(
        self,
        *,
        limit: int | None = None,
        every: bool = False,
        status: str | None = None,
        prefix: str = "",
        after: str | None = None,
        kind: str | None = None,
    ) -> SessionList:
        """The active sessions, or with ``every`` all of them (``GET /v1/sessions``)."""
        given = {
            "limit": limit,
            "status": status,
            "prefix": prefix or None,
            "after": after,
            "kind": kind,
        }
        params = {name: str(value) for name, value in given.items() if value is not None}
        if every:
            params["all"] = "true"
        return self._parse(SessionList, await self._request("GET", "/v1/sessions", params=params))

    async def session(
        self, session_id: str, *, entries: int | None = None, at: int | None = None
    ) -> SessionView:
        params = {} if entries is None else {"entries": str(entries)}
        if at is not None:
            params["at"] = str(at)
        response = await self._request("GET", f"/v1/sessions/{session_id}", params=params)
        return self._parse(SessionView, response)

    async def cancel(
        self,
        session_id: str,
        *,
        request_id: str | None = None,
        task_id: str | None = None,
        reason: str | None = None,
    ) -> CancelAccepted:
        """Ask for a submission (or one task) to be cancelled."""
        fields: dict[str, Any] = {"request_id": request_id, "task_id": task_id}
        if reason is not None:
            fields["reason"] = reason
        body = CancelRequest.model_validate(fields)
        response = await self._request(
            "POST", f"/v1/sessions/{session_id}/cancel", json=body.model_dump(exclude_none=True)
        )
        return self._parse(CancelAccepted, response)

    async def fork(self, session_id: str, *, at: int, into: str) -> ForkView:
        """Start session ``into`` as ``session_id`` was right after commit ``at``."""
        body = ForkRequest(at=at, into=into)
        response = await self._request(
            "POST", f"/v1/sessions/{session_id}/fork", json=body.model_dump()
        )
        return self._parse(ForkView, response)

    async def events(
        self,
        session_id: str,
        *,
        last_event_id: int | None = None,
        entries: int | None = None,
    ) -> AsyncGenerator[StreamItem, None]:
        """One connection of the session's stream, until the server ends it. A dropped
        connection or an ``error`` event raises (``StoreUnavailable`` when retryable)."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        params = {} if entries is None else {"entries": str(entries)}
        path = f"/v1/sessions/{session_id}/events"
        try:
            async with self._http.stream(
                "GET", path, headers=headers, params=params, timeout=self._stream_timeout
            ) as response:
                if not response.is_success:
                    await response.aread()
                    raise error_of(response, self.what)
                parser = EventParser()
                async for line in response.aiter_lines():
                    parsed = parser.feed(line)
                    if parsed is not None:
                        item = _item(*parsed)
                        if item is not None:
                            yield item
        except httpx.HTTPError as error:
            raise StoreUnavailable(
                f"the event stream of session {session_id} at {self.base_url} broke: {error!r}"
            ) from None

    async def follow(
        self,
        session_id: str,
        *,
        last_event_id: int | None = None,
        entries: int | None = None,
        retry: float = 1.0,
        on_retry: Callable[[int, BrainhandsError], None] | None = None,
    ) -> AsyncGenerator[StreamItem, None]:
        """The session's stream across reconnects: after a drop (or the server's end of
        a stream) it reconnects with ``Last-Event-ID``, so every commit comes once.
        Gives up after ``GIVE_UP_AFTER`` failed connections in a row; errors that a
        retry cannot fix (401, 404, 422) are raised at once. ``on_retry`` hears each
        failed connection (its number in a row, the error) before the pause."""
        last, failures = last_event_id, 0
        while True:
            try:
                stream = self.events(session_id, last_event_id=last, entries=entries)
                async with aclosing(stream) as items:
                    async for item in items:
                        failures = 0
                        if not isinstance(item, PreviewView):  # a preview precedes its commit
                            last = item.seq
                        yield item
                delay = retry
            except BrainhandsError as error:
                failures += 1
                if not error.retryable or failures >= GIVE_UP_AFTER:
                    raise
                if on_retry is not None:
                    on_retry(failures, error)
                delay = min(retry * 2 ** (failures - 1), 10 * retry)
            await asyncio.sleep(delay)


class EventParser:
    """Server-Sent Events, a line at a time: ``feed`` returns ``(event, data, id)`` when
    a blank line completes an event. Comments (keepalives) are skipped."""

    def __init__(self) -> None:
        self.retry: int | None = None
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> tuple[str, str, str | None] | None:
        if not line:
            if not self._data:
                self._reset()
                return None
            parsed = (self._event or "message", "\n".join(self._data), self._id)
            self._reset()
            return parsed
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self._id = value
        elif field == "retry" and value.isdigit():
            self.retry = int(value)
        return None

    def _reset(self) -> None:
        self._event, self._data, self._id = None, [], None


def merge(view: SessionView, commit: CommitEvent, *, keep_entries: int = 20) -> SessionView:
    """``view`` advanced by ``commit`` (unchanged when ``commit`` is not newer).

    Operation records and the control document (blocked tasks, cancel requests) are
    not in commits: re-read the view when ``needs_refresh(commit)``.
    """
    if commit.seq <= view.seq:
        return view
    tasks = {task.id: task for task in view.tasks} | {task.id: task for task in commit.tasks}
    submissions = {s.request_id: s for s in view.submissions} | {
        s.request_id: s for s in commit.submissions
    }
    entries = view.entries + [
        entry.model_copy(update={"index": view.entry_count + n})
        for n, entry in enumerate(commit.entries)
    ]
    done = set(commit.outbox_done)
    outbox = [m for m in view.outbox if m.id not in done] + commit.outbox
    applied = set(commit.applied_operations)
    operations = [
        op.model_copy(update={"applied": True}) if op.operation_id in applied else op
        for op in view.operations
    ]
    holder = (
        commit.holder if commit.claim else (view.holder if commit.fence == view.fence else None)
    )
    return view.model_copy(
        update={
            "seq": commit.seq,
            "fence": commit.fence,
            "holder": holder,
            "updated_at": commit.committed_at,
            "tasks": list(tasks.values()),
            "submissions": list(submissions.values()),
            "entries": _last(entries, keep_entries),
            "entry_count": view.entry_count + len(commit.entries),
            "outbox": outbox,
            "operations": operations,
            "questions": _questions(tasks.values()),
            "active": _active(tasks.values(), submissions.values(), outbox),
        }
    )


def with_preview(view: SessionView, preview: PreviewView) -> SessionView:
    """``view`` showing ``preview`` (a snapshot replacing the older one of its task's
    text or its operation's log; a removal drops it)."""
    kept = {p.key: p for p in view.previews}
    held = kept.get(preview.key)
    if held is not None and held.seq > preview.seq:
        return view
    if preview.removed:
        kept.pop(preview.key, None)
    else:
        kept[preview.key] = preview
    return view.model_copy(update={"previews": sorted(kept.values(), key=lambda p: p.key)})


def _questions(tasks: Iterable[TaskView]) -> list[QuestionView]:
    """The open questions, as the server lists them (``describe.open_questions``)."""
    asked = [
        QuestionView(task_id=task.id, question=task.wait.question)
        for task in tasks
        if task.waiting_for_input
        and task.wait is not None
        and task.wait.question is not None
        and not task.cancel_requested
    ]
    return sorted(asked, key=lambda view: view.question.asked_at)


def needs_refresh(commit: CommitEvent) -> bool:
    """Whether ``commit`` touched what only a fresh view shows: operations (dispatched
    or applied) or the control document."""
    return bool(commit.outbox or commit.applied_operations or CONTROL_DOCUMENT in commit.documents)


def _item(event: str, data: str, id: str | None) -> StreamItem | None:
    try:
        if event == VIEW_EVENT:
            return SessionView.model_validate_json(data)
        if event == COMMIT_EVENT:
            return CommitEvent.model_validate_json(data)
        if event == PREVIEW_EVENT:
            return PreviewView.model_validate_json(data)
        if event == ERROR_EVENT:
            info = ErrorInfo.model_validate_json(data)
        else:
            return None  # an event this client does not know: newer servers may add some
    except ValidationError as error:
        raise BrainhandsError(
            f"the Session API sent a {event} event this client cannot read: "
            f"{error.errors()[0]['msg']}"
        ) from None
    raise BrainhandsError.from_info(info)


def _active(
    tasks: Iterable[TaskView], submissions: Iterable[SubmissionView], outbox: list[OutboxView]
) -> bool:
    return (
        bool(outbox)
        or any(task.status is not TaskStatus.TERMINAL for task in tasks)
        or any(not submission.status.is_final for submission in submissions)
    )


def _last(entries: list[EntryView], keep: int) -> list[EntryView]:
    return entries[-keep:] if keep > 0 else []
