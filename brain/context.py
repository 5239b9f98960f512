"""What a phase handler sees: its task, a read-only view of the session, and services."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import JsonValue

from brain.operations import Operations, Performed
from brain.progress import Progress
from brain.reservations import Reservations
from brain.services import Services
from contracts import Answer, Budget, Document, Entry, NotFound, Operation, Task, Usage
from contracts.workspace import WorkspaceVersion
from coordination.leases import LeaseProof
from session_store import SessionHandle
from session_store.usage import budget_of, usage_of

T = TypeVar("T")


class CallInterrupted(Exception):
    """A new message abandoned this phase's call (policy ``interrupt``): the phase ends
    here, and the drive enters the phase its kind names instead. ``started``: whether
    the call had begun (it may have been billed); ``why``: what interrupted it."""

    def __init__(self, why: str, *, started: bool) -> None:
        super().__init__(why)
        self.why = why
        self.started = started


class PhaseContext:
    """Handed to a phase handler. Reading is free; all writing goes through the outcome."""

    def __init__(
        self,
        task: Task,
        handle: SessionHandle,
        services: Services,
        *,
        lease: LeaseProof | None = None,
        progress: Progress | None = None,
        reservations: Reservations | None = None,
    ) -> None:
        self.task = task
        self._progress = progress
        self._reservations = reservations if reservations is not None else Reservations()
        #: why a new message interrupted this phase (None: it was not)
        self._interrupted: str | None = None
        self._call: asyncio.Future[Any] | None = None
        self._handle = handle
        self.services = services
        state = handle.state
        lineage = state.origin.lineage() if state.origin else []
        inherited = {op for origin in lineage for op in origin.operations}
        self._operations = Operations(
            services,
            handle.session_id,
            task,
            lease=lease,
            lineage=[origin.session_id for origin in lineage],
            inherited=lambda op: op in inherited or op in state.intents,
            state=lambda: handle.state,
        )
        #: workspace versions the calls of this phase run produced, by operation: the
        #: outcome that applies one of them moves the session's head to it
        self.versions: dict[str, WorkspaceVersion] = {}

    @property
    def session_id(self) -> str:
        return self._handle.session_id

    @property
    def attempt(self) -> int:
        """Which start of this phase this is: 1 first time, more after crashes or retries."""
        return self.task.attempts

    @property
    def memo(self) -> dict[str, JsonValue]:
        return self.task.memo

    def memo_int(self, key: str, default: int = 0) -> int:
        value = self.task.memo.get(key, default)
        return value if isinstance(value, int) else default

    @property
    def input(self) -> Any:
        return self.task.input

    def now(self) -> datetime:
        return self.services.clock()

    def answer(self, question_id: str) -> Answer:
        """How this task's question ``question_id`` was settled (its answer, the
        deadline's denial, or closed); ``NotFound`` if it was never settled."""
        answer = self.task.answers.get(question_id)
        if answer is None:
            raise NotFound(f"task {self.task.id} has no answer to {question_id!r}")
        return answer

    def joined_messages(self) -> list[str]:
        """Request ids of open messages that joined this task (they arrived while it ran
        in their conversation, ``brain.ingest``), oldest first."""
        return [
            sub.request_id
            for sub in self._handle.state.submissions.values()
            if sub.task_id == self.task.id
            and sub.request_id != self.task.owner_id
            and not sub.status.is_final
        ]

    def session_usage(self) -> Usage:
        """What the session's model calls used so far (every task's)."""
        return usage_of(self._handle.state).total

    def session_budget(self) -> Budget | None:
        return budget_of(self._handle.state)

    def reserved_by_others(self) -> Usage:
        """What the other tasks' model calls in flight may use, at their estimates
        (``brain.reservations``): not committed yet, but a budget counts them."""
        return self._reservations.others(self.task.id)

    def reserve(self, estimate: Usage) -> None:
        """Hold ``estimate`` for this phase's model call until its outcome is
        committed (check, then reserve, with no await between: one step)."""
        self._reservations.hold(self.task.id, estimate)

    async def reservation_released(self) -> None:
        """Until another task's call in flight is settled (its outcome committed)."""
        await self._reservations.released()

    def document(self, name: str) -> Document | None:
        return self._handle.state.documents.get(name)

    def get_task(self, task_id: str) -> Task | None:
        """A task of the session's open work; children of this task are always here."""
        return self._handle.state.tasks.get(task_id)

    def children(self) -> list[Task]:
        """Tasks this task created, in creation order (kept while this task is open)."""
        return [t for t in self._handle.state.tasks.values() if t.parent_id == self.task.id]

    async def conversation(self, conversation_id: str) -> list[Entry]:
        return [e for e in await self._handle.entries() if e.conversation_id == conversation_id]

    def preview(self, request: str, piece: str) -> None:
        """A piece of text this phase is receiving for ``request`` (a model call's
        attempt): saved by a deferred commit, may be lost, drives nothing."""
        if self._progress is not None:
            self._progress.note(self.task.id, request, piece)

    def previewed(self) -> str | None:
        """The text this phase has previewed so far (saved or not)."""
        return None if self._progress is None else self._progress.text(self.task.id)

    async def interruptible(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` (a model call) so that a new message may abandon it: then
        ``CallInterrupted`` is raised, also when the message came before the call began
        (the call is not made). Only the call itself is abandoned: once it returned, its
        answer is this phase's to record, whatever arrives meanwhile."""
        if self._interrupted is not None:
            raise CallInterrupted(self._interrupted, started=False)
        running: asyncio.Future[T] = asyncio.ensure_future(call())
        self._call = running
        try:
            return await running
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if self._interrupted is None or (this is not None and this.cancelling()):
                raise  # the phase itself is stopped (cancelled task, drive ending)
            raise CallInterrupted(self._interrupted, started=True) from None
        finally:
            self._call = None

    def interrupt(self, why: str) -> None:
        """A new message asks to abandon this phase's call (the drive, once that message
        is committed): the call in flight is cancelled; one not begun is not made."""
        self._interrupted = why
        if self._call is not None:
            self._call.cancel()

    def crash_point(self, name: str) -> None:
        """A moment where a crash is worth testing (see ``runtime.crashpoints``)."""
        self.services.crash.reached(name)

    def operation_id(self, key: str) -> str:
        """The id of this task's operation ``key`` (derived, stable across attempts)."""
        return self._operations.id_for(key)

    async def operation(self, tool: str, args: dict[str, Any], key: str) -> Performed:
        """Run this task's external action ``key`` once, recovering safely if an earlier
        attempt died or may still be running (``brain.operations``)."""
        performed = await self._operations.perform(tool, args, key)
        if performed.version is not None:
            self.versions[performed.operation_id] = performed.version
        return performed

    @property
    def cancelled_operation(self) -> Operation | None:
        """The operation whose call was in flight when this phase was cancelled."""
        return self._operations.cancelled

    async def record_cancelled_call(self) -> Operation | None:
        """This phase's task was cancelled: record its in-flight call, if any, as
        uncertain, and return it."""
        await asyncio.shield(self._operations.mark_cancelled())
        return self._operations.cancelled
