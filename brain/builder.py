"""Assembles one commit from many decisions, keeping task revisions straight.

Several decisions of one kernel step may touch the same task (a cancel request and a
phase start, say); the builder keeps one new revision per task (stored rev + 1) and
applies later changes on top of earlier ones in the same commit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from brain.outcome import Effects, TaskSpec
from contracts import (
    USAGE_DOCUMENT,
    Commit,
    Document,
    DocumentPut,
    DocumentWrite,
    Entry,
    Intent,
    ModelUsage,
    OutboxMessage,
    Submission,
    Task,
    Usage,
)
from contracts.workspace import WorkspaceVersion
from session_store import SessionState
from session_store.usage import session_usage


class CommitBuilder:
    def __init__(self, state: SessionState, now: datetime) -> None:
        self._state = state
        self.now = now
        self._tasks: dict[str, Task] = {}
        self._submissions: dict[str, Submission] = {}
        self._entries: list[Entry] = []
        self._documents: list[DocumentWrite] = []
        self._outbox: list[OutboxMessage] = []
        self._sent: list[str] = []
        self._applied: list[str] = []
        self._intents: dict[str, Intent] = {}
        #: tasks whose running phase a new message asks to abandon (policy interrupt)
        self.interrupts: set[str] = set()
        self._usage: list[ModelUsage] = []
        self._workspace: WorkspaceVersion | None = None

    def task(self, task_id: str) -> Task:
        """The task as this commit will leave it (so far)."""
        return self._tasks.get(task_id) or self._state.tasks[task_id]

    def tasks(self) -> list[Task]:
        return list(self.tasks_by_id().values())

    def tasks_by_id(self) -> dict[str, Task]:
        merged = dict(self._state.tasks)
        merged.update(self._tasks)
        return merged

    def state_view(self) -> SessionState:
        """The session as this commit would leave it, for planning (tasks and
        submissions only; everything else as stored)."""
        if not self._tasks and not self._submissions:
            return self._state
        return self._state.model_copy(
            update={
                "tasks": self.tasks_by_id(),
                "submissions": {**self._state.submissions, **self._submissions},
            }
        )

    def update(self, task_id: str, **changes: Any) -> Task:
        current = self.task(task_id)
        stored = self._state.tasks.get(task_id)
        rev = current.rev if task_id in self._tasks else current.rev + 1
        if stored is None:  # created in this very commit
            rev = 1
        # the fields as they are (nested records are frozen and validated already): only
        # the new values are checked, and no dump of the whole record is made per phase
        updated = Task.model_validate(
            {**current.__dict__, **changes, "rev": rev, "updated_at": self.now}
        )
        self._tasks[task_id] = updated
        return updated

    def create(self, spec: TaskSpec, *, parent_id: str | None, owner_id: str | None = None) -> Task:
        task = Task(
            id=spec.id,
            kind=spec.kind,
            version=spec.version,
            input=spec.input,
            phase=spec.phase,
            parent_id=parent_id,
            owner_id=owner_id,
            created_at=self.now,
            updated_at=self.now,
        )
        self._tasks[task.id] = task
        return task

    def document(self, name: str) -> Document | None:
        """A document as stored (documents written in this commit are not merged in)."""
        return self._state.documents.get(name)

    def submissions(self) -> list[Submission]:
        """Every submission of the open state, as this commit will leave it (so far)."""
        return [self._submissions.get(key, sub) for key, sub in self._state.submissions.items()]

    def submission(self, request_id: str) -> Submission:
        return self._submissions.get(request_id) or self._state.submissions[request_id]

    def find_submission(self, request_id: str) -> Submission | None:
        return self._submissions.get(request_id) or self._state.submissions.get(request_id)

    def update_submission(self, request_id: str, **changes: Any) -> Submission:
        current = self.submission(request_id)
        rev = current.rev if request_id in self._submissions else current.rev + 1
        updated = Submission.model_validate(
            {**current.__dict__, **changes, "rev": rev, "updated_at": self.now}
        )
        self._submissions[request_id] = updated
        return updated

    def add(self, effects: Effects, *, parent_id: str) -> None:
        self._entries.extend(effects.entries)
        self._documents.extend(effects.documents)
        # A message still pending (e.g. a dispatch re-made by a re-run phase) is the same
        # intent: adding it again would be refused by the store and gain nothing.
        self._outbox.extend(m for m in effects.outbox if m.id not in self._state.outbox)
        self._applied.extend(effects.applied_operations)
        for intent in effects.intents:  # committed earlier: the same intent, kept
            if intent.operation_id not in self._state.intents:
                self._intents.setdefault(intent.operation_id, intent)
        for spec in effects.spawn:
            self.create(spec, parent_id=parent_id)
        if effects.workspace is not None:
            self._workspace = effects.workspace
        if effects.usage is not None:
            task = self.task(parent_id)
            self.update(parent_id, usage=task.usage.plus(effects.usage.usage))
            self._usage.append(effects.usage)

    def write(self, document: DocumentWrite) -> None:
        """A document change made by the kernel itself (not a phase's effects)."""
        self._documents.append(document)

    def mark_sent(self, message_ids: list[str]) -> None:
        """Outbox messages the relay published: no longer pending."""
        self._sent.extend(i for i in message_ids if i in self._state.outbox)

    def _usage_document(self) -> tuple[DocumentWrite, ...]:
        """The session's usage totals with this commit's calls added (the kernel is
        their only writer, and it builds on the newest state)."""
        if not self._usage:
            return ()
        stored = self._state.documents.get(USAGE_DOCUMENT)
        totals = session_usage(stored.body if stored is not None else {})
        by_model = dict(totals.by_model)
        for call in self._usage:
            by_model[call.model] = by_model.get(call.model, Usage()).plus(call.usage)
            totals = totals.model_copy(update={"total": totals.total.plus(call.usage)})
        body = totals.model_copy(update={"by_model": by_model}).model_dump(mode="json")
        return (DocumentPut(name=USAGE_DOCUMENT, body=body),)

    def build(self) -> Commit:
        return Commit(
            entries=tuple(self._entries),
            documents=(*self._documents, *self._usage_document()),
            tasks=tuple(self._tasks.values()),
            submissions=tuple(self._submissions.values()),
            outbox=tuple(self._outbox),
            outbox_done=tuple(self._sent),
            applied_operations=tuple(self._applied),
            intents=tuple(self._intents.values()),
            workspace=self._workspace,
        )
