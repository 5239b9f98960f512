"""Describing a session: the store's records turned into the API's views.

A view is read from one loaded state (one seq), plus the session's operation records,
which live beside the log; ``blocked`` comes from the ``blocked`` member of the
session's control document, where the scheduler reports tasks no Brain can run
(``{task_id: reason}`` or ``{task_id: {"reason": ...}}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from contracts import (
    CONTROL_DOCUMENT,
    PROGRESS_DOCUMENT,
    Commit,
    CommitRecord,
    DocumentPatch,
    Entry,
    Operation,
    OperationResult,
    OutputPreview,
    Submission,
    Task,
)
from session_api.views import (
    Archived,
    BlockedTask,
    CommitEvent,
    DecisionView,
    EntryView,
    OperationView,
    OutboxView,
    PreviewView,
    QuestionView,
    ResultSummary,
    SessionSummary,
    SessionView,
    SubmissionView,
    TaskView,
    WaitView,
)
from session_store import SessionHandle, SessionState, SessionStore
from session_store.collection import retention_of
from session_store.submissions import DECISIONS, input_policy
from session_store.usage import budget_of, usage_of

#: Entries are shortened to this many characters.
TEXT_LIMIT: Final = 200
#: Settled operations shown beside the open ones (the newest).
SETTLED_OPERATIONS: Final = 50
_RECORD_FIELDS: Final = tuple(set(OperationView.model_fields) - {"applied", "result"})
#: Operation results read at once.
_READS: Final = 16


async def session_view(store: SessionStore, handle: SessionHandle, *, entries: int) -> SessionView:
    """The view of ``handle``'s session as of its seq, with its last ``entries`` entries."""
    state = handle.state
    blocked = blocked_tasks(state)
    reasons = {item.task_id: item.reason for item in blocked}
    start = max(0, state.entry_count - entries)
    recent = await handle.entries(start) if entries else []
    operations = await store.list_operations(state.session_id)
    control = control_body(state)
    return SessionView(
        session_id=state.session_id,
        seq=state.seq,
        fence=state.fence,
        holder=state.holder,
        updated_at=state.updated_at,
        active=state.is_active,
        submissions=[submission_view(sub) for sub in _by_time(state.submissions)],
        tasks=[task_view(task, reasons.get(task.id)) for task in _by_time(state.tasks)],
        operations=await _operation_views(store, handle, operations),
        operations_total=len(operations),
        entries=[entry_view(e, start + n) for n, e in enumerate(recent)],
        entry_count=state.entry_count,
        blocked=blocked,
        questions=open_questions(state),
        previews=[*previews_of(state), *await output_previews(store, state)],
        cancel_requests=_strings(control.get("cancel_requests")),
        cancel_tasks=_strings(control.get("cancel_tasks")),
        decisions=_decisions(control.get(DECISIONS)),
        input_policy=input_policy(state, None),
        usage=usage_of(state),
        budget=budget_of(state),
        retention=retention_of(state),
        outbox=[OutboxView(id=m.id, topic=m.topic) for m in state.outbox.values()],
        archived=Archived(
            entries=state.entries_archived,
            tasks=state.archived_tasks,
            submissions=state.archived_submissions,
        ),
        problems=list(handle.problems),
    )


def session_summary(state: SessionState) -> SessionSummary:
    return SessionSummary(
        session_id=state.session_id,
        seq=state.seq,
        holder=state.holder,
        updated_at=state.updated_at,
        active=state.is_active,
        open_tasks=sum(1 for task in state.tasks.values() if not task.is_terminal),
        open_submissions=sum(1 for s in state.submissions.values() if not s.status.is_final),
        blocked=len(blocked_tasks(state)),
        waiting_for_input=len(open_questions(state)),
        kinds=sorted({task.kind for task in state.tasks.values() if task.parent_id is None}),
    )


def open_questions(state: SessionState) -> list[QuestionView]:
    """The questions the session's waiting tasks ask, oldest first."""
    asked = [
        QuestionView(task_id=task.id, question=question)
        for task in state.tasks.values()
        if (question := task.question) is not None and not task.cancel_requested
    ]
    return sorted(asked, key=lambda view: view.question.asked_at)


def commit_event(record: CommitRecord) -> CommitEvent:
    """What one stored commit changed, compactly."""
    commit = record.commit
    return CommitEvent(
        session_id=record.session_id,
        seq=record.seq,
        committed_at=record.committed_at,
        fence=record.fence,
        claim=record.claim,
        holder=record.holder,
        writer=record.writer,
        tasks=[task_view(task) for task in commit.tasks],
        submissions=[submission_view(sub) for sub in commit.submissions],
        entries=[entry_view(entry) for entry in commit.entries],
        documents=sorted({write.name for write in commit.documents}),
        applied_operations=list(commit.applied_operations),
        decisions=_decisions(_patched(commit, DECISIONS)),
        outbox=[OutboxView(id=m.id, topic=m.topic) for m in commit.outbox],
        outbox_done=list(commit.outbox_done),
    )


def previews_of(state: SessionState) -> list[PreviewView]:
    """The previews the session's progress document holds (running tasks' text)."""
    document = state.documents.get(PROGRESS_DOCUMENT)
    members = document.body if document is not None else {}
    return [
        _preview(state.session_id, state.seq, task_id, member)
        for task_id, member in sorted(members.items())
        if isinstance(member, dict)
    ]


async def output_previews(store: SessionStore, state: SessionState) -> list[PreviewView]:
    """The saved logs of the session's running operations (its open intents)."""
    found = await asyncio.gather(*(store.get_output_preview(op) for op in state.intents))
    return [
        output_view(state.session_id, state.seq, state.intents[p.operation_id].task_id, p)
        for p in found
        if p is not None
    ]


def output_view(
    session_id: str, seq: int, task_id: str | None, preview: OutputPreview
) -> PreviewView:
    return PreviewView(
        kind="tool_output",
        session_id=session_id,
        seq=seq,
        task_id=task_id or "",
        operation_id=preview.operation_id,
        text=preview.text,
        chars=preview.bytes,
        truncated=preview.bytes > len(preview.text.encode()),
        at=preview.at,
    )


def preview_events(record: CommitRecord) -> list[PreviewView]:
    """The previews a commit saved or removed (deferred commits, and the commits that
    folded pending previews in or superseded them)."""
    found: list[PreviewView] = []
    for write in record.commit.documents:
        if write.name != PROGRESS_DOCUMENT or not isinstance(write, DocumentPatch):
            continue
        for task_id, member in write.patch.items():
            if member is None:
                found.append(
                    PreviewView(
                        session_id=record.session_id, seq=record.seq, task_id=task_id, removed=True
                    )
                )
            elif isinstance(member, dict):
                found.append(_preview(record.session_id, record.seq, task_id, member))
    return found


def _preview(session_id: str, seq: int, task_id: str, member: Mapping[str, Any]) -> PreviewView:
    """A progress member as a view; one that does not parse is shown as empty, flagged."""
    try:
        return PreviewView.model_validate(
            {**member, "session_id": session_id, "seq": seq, "task_id": task_id, "preview": True}
        )
    except ValidationError:
        return PreviewView(session_id=session_id, seq=seq, task_id=task_id, text="(unreadable)")


def submission_view(submission: Submission) -> SubmissionView:
    return SubmissionView.model_validate(
        {name: getattr(submission, name) for name in SubmissionView.model_fields}
    )


def task_view(task: Task, blocked: str | None = None) -> TaskView:
    wait = task.wait
    return TaskView(
        id=task.id,
        kind=task.kind,
        version=task.version,
        parent_id=task.parent_id,
        owner_id=task.owner_id,
        status=task.status,
        phase=task.phase,
        rev=task.rev,
        attempts=task.attempts,
        crashes=task.crashes,
        wait=None
        if wait is None
        else WaitView(
            tasks=list(wait.tasks),
            operations=list(wait.operations),
            join=wait.join,
            question=wait.question,
            next_phase=wait.next_phase,
        ),
        sleep_until=task.sleep.until if task.sleep else None,
        next_phase=task.sleep.next_phase if task.sleep else None,
        parked=task.parked,
        blocked=blocked,
        waiting_for_input=task.question is not None,
        answers=dict(task.answers),
        usage=task.usage,
        cancel_requested=task.cancel_requested,
        outcome=task.outcome,
        result=task.result,
        error=task.error,
        reason=task.reason,
        created_at=task.created_at,
        updated_at=task.updated_at,
    )


def entry_view(entry: Entry, index: int | None = None) -> EntryView:
    return EntryView(
        index=index,
        id=entry.id,
        kind=entry.kind,
        conversation_id=entry.conversation_id,
        task_id=entry.task_id,
        operation_id=entry.operation_id,
        text=short_text(entry),
        created_at=entry.created_at,
    )


def short_text(entry: Entry) -> str:
    """The entry's content on one line, at most ``TEXT_LIMIT`` characters."""
    content = entry.content
    if isinstance(content, str):
        text = content
    elif content is None:
        text = "" if entry.blob is None else f"[{entry.blob.media_type}, {entry.blob.size:,} bytes]"
    else:
        text = json.dumps(content, separators=(",", ":"), ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def blocked_tasks(state: SessionState) -> list[BlockedTask]:
    """The scheduler's report of tasks no Brain can run (empty until it writes one)."""
    reported = control_body(state).get("blocked")
    if not isinstance(reported, Mapping):
        return []
    found = []
    for task_id, said in sorted(reported.items()):
        reason = said.get("reason") if isinstance(said, Mapping) else said
        task = state.tasks.get(str(task_id))
        found.append(
            BlockedTask(
                task_id=str(task_id),
                kind=task.kind if task else None,
                version=task.version if task else None,
                reason=str(reason or "no handler for its kind and version"),
            )
        )
    return found


async def _operation_views(
    store: SessionStore, handle: SessionHandle, operations: list[Operation]
) -> list[OperationView]:
    """The open operations and the newest settled ones, oldest first, with how each
    ended and whether its result entered the session."""
    ordered = sorted(operations, key=lambda op: (op.created_at, op.operation_id))
    settled = [op.operation_id for op in ordered if op.status.is_final]
    shown = set(settled[-SETTLED_OPERATIONS:])
    kept = [op for op in ordered if not op.status.is_final or op.operation_id in shown]
    limit = asyncio.Semaphore(_READS)

    async def view(operation: Operation) -> OperationView:
        async with limit:
            result = None
            if operation.status.is_final:
                result = await store.get_operation_result(operation.operation_id)
            applied = await handle.is_applied(operation.operation_id)
        return operation_view(operation, result, applied=applied)

    return list(await asyncio.gather(*(view(op) for op in kept)))


def operation_view(
    operation: Operation, result: OperationResult | None, *, applied: bool
) -> OperationView:
    fields = {name: getattr(operation, name) for name in _RECORD_FIELDS}
    fields.update(
        applied=applied,
        result=None
        if result is None
        else ResultSummary(
            succeeded=result.succeeded,
            termination=result.termination,
            exit_code=result.exit_code,
            error=result.error,
            finished_at=result.finished_at,
            path=result.path,
            container=result.container,
            started_at=result.started_at,
        ),
    )
    return OperationView.model_validate(fields)


def _by_time(records: Mapping[str, Task] | Mapping[str, Submission]) -> list[Any]:
    return sorted(records.values(), key=lambda record: record.created_at)


def control_body(state: SessionState) -> dict[str, Any]:
    """The body of the session's control document (empty when there is none)."""
    document = state.documents.get(CONTROL_DOCUMENT)
    return document.body if document is not None else {}


def _patched(commit: Commit, member: str) -> object:
    """What ``commit`` wrote to ``member`` of the session's control document."""
    for write in commit.documents:
        patch = getattr(write, "patch", None)
        if write.name == CONTROL_DOCUMENT and isinstance(patch, Mapping) and member in patch:
            return patch[member]
    return None


def _decisions(value: object) -> dict[str, DecisionView]:
    """Operators' decisions by operation id; one that does not read as one is left out."""
    if not isinstance(value, Mapping):
        return {}
    found = {}
    for operation_id, decision in value.items():
        with contextlib.suppress(ValidationError):
            found[str(operation_id)] = DecisionView.model_validate(decision)
    return found


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(key): str(reason) for key, reason in value.items()}
