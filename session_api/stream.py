"""A session's event stream (Server-Sent Events): its view, then one event per commit.

The stream reads the session's log directly — only the records after the last seq it
sent, polling more slowly while nothing happens — so following a session costs one
small range read per poll, whatever the session's size::

    retry: 1000

    event: view                   (unless resuming)
    id: 41
    data: {"session_id": "s1", "seq": 41, ...}          SessionView

    event: preview                (a commit that saved streamed text: before it, no id)
    data: {"preview": true, "task_id": "root.r1", "text": "...", ...}   PreviewView

    event: commit
    id: 42
    data: {"session_id": "s1", "seq": 42, "tasks": [...], ...}   CommitEvent

    : keepalive                   (after ``heartbeat`` without events)

    event: error                  (the store failed; the stream ends: reconnect)
    data: {"code": "store_unavailable", "message": "...", "details": {}}

A client that reconnects with ``Last-Event-ID: n`` gets the commits after seq ``n``,
and no view. When ``n`` is unknown to the log (above its head) or more than
``catch_up`` commits behind, it gets a fresh ``view`` instead, and commits after it.
The stream ends after ``max_duration``, when the client goes away, or when the server
stops; clients reconnect with the last id they saw.

How many streams are open at once is bounded per token and per process
(``StreamSlots``): a slot is reserved before the stream opens — synchronously, so
concurrent requests cannot all pass a check only some of them should (invariant 20) —
and released when the response ends however it ends (``HeldStream``); over a cap the
request is refused with ``TooManyRequests`` (429, ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from contracts import BrainhandsError, CommitRecord, ErrorInfo, OutputPreview
from contracts.errors import TooManyRequests
from contracts.model import Frozen
from session_api.describe import commit_event, output_view, preview_events, session_view
from session_api.views import COMMIT_EVENT, ERROR_EVENT, PREVIEW_EVENT, VIEW_EVENT, PreviewView
from session_store import SessionStore
from webapi.errors import error_info

log = logging.getLogger(__name__)


class StreamSettings(Frozen):
    """How event streams poll and how long they last."""

    #: delay before the first poll after news; it doubles while nothing happens ...
    poll: timedelta = timedelta(milliseconds=200)
    #: ... or this, without doubling, for ``preview_hold`` after a commit that saved a
    #: preview: text is streaming, keep up with it
    preview_poll: timedelta = timedelta(milliseconds=50)
    preview_hold: timedelta = timedelta(seconds=1)
    #: while operations run, their saved logs are read this often (and polls wait no
    #: longer than this)
    output_poll: timedelta = timedelta(seconds=1)
    #: ... up to this
    idle_poll: timedelta = timedelta(seconds=2)
    #: a comment line after this long without events keeps proxies from closing
    heartbeat: timedelta = timedelta(seconds=15)
    #: a stream ends after this long; the client reconnects with ``Last-Event-ID``
    max_duration: timedelta = timedelta(minutes=10)
    #: a client more commits behind than this gets a fresh view instead
    catch_up: int = Field(default=1000, ge=1)
    #: log records read per poll
    page: int = Field(default=100, ge=1)
    #: what clients are told to wait before reconnecting (the ``retry`` field)
    retry: timedelta = timedelta(seconds=1)
    #: streams open at once in this process, and for one token (``StreamSlots``)
    max_open: int = Field(default=256, ge=1)
    max_open_per_token: int = Field(default=16, ge=1)
    #: what a request refused over a cap is told to wait (``Retry-After``)
    refused_retry: timedelta = timedelta(seconds=5)


class StreamSlots:
    """The event streams open now, per token and in all: ``reserve`` one before a
    stream opens, ``Slot.release`` it when the stream ends (``HeldStream`` does)."""

    def __init__(self, settings: StreamSettings) -> None:
        self._settings = settings
        self._by_token: Counter[str] = Counter()
        self.open = 0

    def reserve(self, token: str) -> Slot:
        """A slot for a stream of ``token`` (a grant's name), taken now — no await
        between the check and the count; ``TooManyRequests`` over either cap."""
        settings = self._settings
        if self._by_token[token] >= settings.max_open_per_token:
            self._refuse(
                f"the token {token!r} has {self._by_token[token]} event streams open, its "
                f"most at once: close one (another tab?) or wait",
                settings.max_open_per_token,
            )
        if self.open >= settings.max_open:
            self._refuse(
                f"this server has {self.open} event streams open, its most at once: retry "
                "later or elsewhere",
                settings.max_open,
            )
        self._by_token[token] += 1
        self.open += 1
        return Slot(self, token)

    def _refuse(self, message: str, limit: int) -> None:
        retry = self._settings.refused_retry.total_seconds()
        raise TooManyRequests(message, limit=limit, retry_after=retry)

    def _release(self, token: str) -> None:
        self.open -= 1
        self._by_token[token] -= 1
        if self._by_token[token] <= 0:
            del self._by_token[token]


class Slot:
    """One reserved stream; ``release`` gives it back (once, however often called)."""

    def __init__(self, slots: StreamSlots, token: str) -> None:
        self._slots: StreamSlots | None = slots
        self._token = token

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots._release(self._token)


class HeldStream(StreamingResponse):
    """A streaming response that gives its slot back when it ends — also when it never
    started (the client gone before the first byte: the body's generator never ran, so
    its own ``finally`` would not)."""

    def __init__(self, slot: Slot, content: AsyncIterator[bytes], **options: Any) -> None:
        super().__init__(content, **options)
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()


class SessionStream:
    """One client's stream of one session: ``open`` (before answering, so its errors
    are ordinary error answers), then iterate ``events()``."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        *,
        settings: StreamSettings,
        entries: int,
        gone: Callable[[], Awaitable[bool]],
        stopping: asyncio.Event,
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._settings = settings
        self._entries = entries
        self._gone = gone
        self._stopping = stopping
        self._opening: list[bytes] = []
        self._seq = 0
        #: the session's running operations (open intents) and their tasks
        self._running: dict[str, str] = {}
        #: when each one's log preview that was last sent was saved
        self._shown: dict[str, datetime] = {}
        self._outputs_read = -math.inf
        #: whether a commit sent since the last poll carried previews (text is streaming)
        self._previewed = False

    async def open(self, last_event_id: int | None) -> None:
        """Resume after ``last_event_id`` when the log can; else start with a view."""
        handle = await self._store.session(self._session_id)
        self._running = {op: i.task_id or "" for op, i in handle.state.intents.items()}
        if last_event_id is not None and last_event_id <= handle.seq:
            limit = self._settings.catch_up
            missed = await self._store.commits(
                self._session_id, after=last_event_id, limit=limit + 1
            )
            if len(missed) <= limit:
                self._seq = last_event_id
                self._opening = [self._commit(record) for record in missed]
                return
        view = await session_view(self._store, handle, entries=self._entries)
        self._seq = view.seq
        self._opening = [event(VIEW_EVENT, view, view.seq)]

    async def events(self) -> AsyncIterator[bytes]:
        settings = self._settings
        yield f"retry: {int(settings.retry.total_seconds() * 1000)}\n\n".encode()
        for chunk in self._opening:
            yield chunk
        self._opening = []
        deadline = time.monotonic() + settings.max_duration.total_seconds()
        quiet_since = time.monotonic()
        previewed_at = -math.inf
        delay = settings.poll.total_seconds()
        while time.monotonic() < deadline and not self._stopping.is_set():
            if await self._gone():
                return
            try:
                records = await self._store.commits(
                    self._session_id, after=self._seq, limit=settings.page
                )
            except BrainhandsError as error:
                log.warning("events of session %s: %s", self._session_id, error.message)
                yield event(ERROR_EVENT, error_info(error))
                return
            for record in records:
                yield self._commit(record)
            async for chunk in self._outputs():
                yield chunk
            if records:
                quiet_since = time.monotonic()
                if self._previewed:
                    previewed_at, self._previewed = quiet_since, False
                delay = settings.poll.total_seconds()
                continue
            if time.monotonic() - quiet_since >= settings.heartbeat.total_seconds():
                yield b": keepalive\n\n"
                quiet_since = time.monotonic()
            if time.monotonic() - previewed_at < settings.preview_hold.total_seconds():
                delay = settings.preview_poll.total_seconds()  # text is streaming
            if self._running:
                delay = min(delay, settings.output_poll.total_seconds())
            await self._pause(delay)
            delay = min(delay * 2, settings.idle_poll.total_seconds())
        yield b": stream ends; reconnect with Last-Event-ID\n\n"

    async def _commits(self, after: int, limit: int) -> list[CommitRecord]:
        return await self._store.commits(self._session_id, after=after, limit=limit)

    def _commit(self, record: CommitRecord) -> bytes:
        """The commit's previews (no id: a client resuming after this seq may see them
        again, which a snapshot allows), then the commit itself."""
        self._seq = record.seq
        previews = [*preview_events(record)]
        self._previewed |= bool(previews)
        for intent in record.commit.intents:
            self._running[intent.operation_id] = intent.task_id or ""
        for op in record.commit.applied_operations:
            task_id = self._running.pop(op, None)
            if self._shown.pop(op, None) is not None:  # its result superseded its log
                previews.append(
                    PreviewView(
                        kind="tool_output",
                        session_id=record.session_id,
                        seq=record.seq,
                        task_id=task_id or "",
                        operation_id=op,
                        removed=True,
                    )
                )
        chunks = b"".join(event(PREVIEW_EVENT, view) for view in previews)
        return chunks + event(COMMIT_EVENT, commit_event(record), record.seq)

    async def _outputs(self) -> AsyncIterator[bytes]:
        """The saved logs of running operations that changed since last sent (read at
        most once per ``output_poll``)."""
        now = time.monotonic()
        if (
            not self._running
            or now - self._outputs_read < self._settings.output_poll.total_seconds()
        ):
            return
        self._outputs_read = now
        running = list(self._running.items())
        found = await asyncio.gather(
            *(self._store.get_output_preview(op) for op, _ in running), return_exceptions=True
        )
        for (op, task_id), preview in zip(running, found, strict=True):
            if not isinstance(preview, OutputPreview) or self._shown.get(op) == preview.at:
                continue  # none yet, unreadable (skipped: previews may be lost), or seen
            self._shown[op] = preview.at
            yield event(PREVIEW_EVENT, output_view(self._session_id, self._seq, task_id, preview))

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)


def event(name: str, data: BaseModel | ErrorInfo, id: int | None = None) -> bytes:
    """One event in the SSE wire format; the JSON data is one line."""
    lines = [f"event: {name}", f"data: {data.model_dump_json()}"]
    if id is not None:
        lines.append(f"id: {id}")
    return ("\n".join(lines) + "\n\n").encode()
