"""The materialised state of a session and the pure rules that advance it by a commit.

``check`` validates a commit against a state without changing it; ``apply`` then
changes the state. The handle runs ``check`` before writing and ``apply`` only after
the store confirmed the write (persist, then adopt); loading replays the log with the
same ``apply``, so a state built from a baseline plus its tail equals one replayed
from the whole log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts import (
    AlreadyApplied,
    AlreadyExists,
    Commit,
    CommitRecord,
    ConflictError,
    CorruptRecord,
    Document,
    DocumentPatch,
    DocumentPut,
    DocumentWrite,
    Entry,
    EntrySegment,
    InvalidInput,
    InvalidTransition,
    NotFound,
    OutboxMessage,
    Submission,
    Task,
)


class SessionState(BaseModel):
    """Everything a session holds after commit ``seq``.

    Old entries are archived in content-addressed segments referenced from
    ``entry_segments``; ``entries_tail`` holds the ones after the last segment. Use
    ``SessionHandle.entries()`` to read the whole history.
    """

    model_config = ConfigDict(extra="forbid")

    v: Literal[1] = 1
    type: Literal["state"] = "state"
    session_id: str
    seq: int = 0
    fence: int = 0
    updated_at: datetime | None = None
    entry_count: int = 0
    entry_segments: list[EntrySegment] = Field(default_factory=list)
    entries_tail: list[Entry] = Field(default_factory=list)
    documents: dict[str, Document] = Field(default_factory=dict)
    tasks: dict[str, Task] = Field(default_factory=dict)
    submissions: dict[str, Submission] = Field(default_factory=dict)
    outbox: dict[str, OutboxMessage] = Field(default_factory=dict)
    applied_operations: set[str] = Field(default_factory=set)

    @property
    def is_active(self) -> bool:
        """True while anything is left to do: open tasks, open submissions, unsent outbox."""
        return bool(
            self.outbox
            or any(not task.is_terminal for task in self.tasks.values())
            or any(not sub.status.is_final for sub in self.submissions.values())
        )

    def snapshot(self) -> SessionState:
        """A copy whose containers are independent of this state (records are frozen)."""
        return self.model_copy(
            update={
                "entry_segments": list(self.entry_segments),
                "entries_tail": list(self.entries_tail),
                "documents": dict(self.documents),
                "tasks": dict(self.tasks),
                "submissions": dict(self.submissions),
                "outbox": dict(self.outbox),
                "applied_operations": set(self.applied_operations),
            }
        )


def check(state: SessionState, commit: Commit) -> None:
    """Raise if ``commit`` cannot follow ``state``; never changes ``state``."""
    _check_entries(commit)
    _check_documents(state, commit.documents)
    _check_revisions("task", {t.id: t.rev for t in state.tasks.values()}, commit.tasks, state)
    _check_revisions(
        "submission",
        {s.request_id: s.rev for s in state.submissions.values()},
        commit.submissions,
        state,
    )
    _check_outbox(state, commit)
    _check_applied(state, commit)


def apply(state: SessionState, record: CommitRecord) -> None:
    """Advance ``state`` by one stored commit (already checked, already persisted)."""
    if record.seq != state.seq + 1 or record.session_id != state.session_id:
        raise CorruptRecord(
            f"commit {record.session_id}#{record.seq} cannot follow "
            f"{state.session_id}#{state.seq}: the log has a gap or a foreign record",
            seq=record.seq,
            head=state.seq,
        )
    commit = record.commit
    state.entries_tail.extend(commit.entries)
    state.entry_count += len(commit.entries)
    for write in commit.documents:
        state.documents[write.name] = _write_document(
            state.documents.get(write.name), write, record.committed_at
        )
    for task in commit.tasks:
        state.tasks[task.id] = task
    for submission in commit.submissions:
        state.submissions[submission.request_id] = submission
    for message_id in commit.outbox_done:
        state.outbox.pop(message_id, None)
    for message in commit.outbox:
        state.outbox[message.id] = message
    state.applied_operations.update(commit.applied_operations)
    state.seq = record.seq
    state.fence = record.fence
    state.updated_at = record.committed_at


def active_after(state: SessionState, commit: Commit) -> bool:
    """Whether ``state`` will be active once ``commit`` is applied, without applying it."""
    done = set(commit.outbox_done)
    if commit.outbox or any(message_id not in done for message_id in state.outbox):
        return True
    tasks = {**state.tasks, **{task.id: task for task in commit.tasks}}
    if any(not task.is_terminal for task in tasks.values()):
        return True
    subs = {**state.submissions, **{s.request_id: s for s in commit.submissions}}
    return any(not sub.status.is_final for sub in subs.values())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch: objects merge recursively, ``null`` deletes a member."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _check_entries(commit: Commit) -> None:
    ids = [entry.id for entry in commit.entries]
    if len(ids) != len(set(ids)):
        raise InvalidInput("a commit may not contain two entries with the same id")


def _check_documents(state: SessionState, writes: tuple[DocumentWrite, ...]) -> None:
    versions = {name: doc.version for name, doc in state.documents.items()}
    for write in writes:
        current = versions.get(write.name, 0)
        if isinstance(write, DocumentPatch) and current == 0:
            raise NotFound(f"document {write.name!r} does not exist; create it with a put")
        if write.expected_version is not None and write.expected_version != current:
            raise ConflictError(
                f"document {write.name!r} is at version {current}, "
                f"the write expected version {write.expected_version}",
                document=write.name,
                version=current,
                expected=write.expected_version,
            )
        versions[write.name] = current + 1


def _check_revisions(
    what: str,
    current: dict[str, int],
    records: tuple[Task, ...] | tuple[Submission, ...],
    state: SessionState,
) -> None:
    seen: set[str] = set()
    for record in records:
        key = record.id if isinstance(record, Task) else record.request_id
        if key in seen:
            raise InvalidInput(f"{what} {key!r} appears twice in one commit")
        seen.add(key)
        have = current.get(key)
        if record.rev == 1 and have is not None:
            raise AlreadyExists(f"{what} {key!r} already exists (rev {have})", key=key)
        if record.rev > 1 and have != record.rev - 1:
            raise ConflictError(
                f"{what} {key!r} rev {record.rev} must replace rev {record.rev - 1}, "
                f"but the session holds {'no such ' + what if have is None else f'rev {have}'}",
                key=key,
                rev=record.rev,
                current=have,
            )
        if have is not None and _is_final(state, what, key):
            raise InvalidTransition(f"{what} {key!r} is final and cannot change", key=key)


def _is_final(state: SessionState, what: str, key: str) -> bool:
    if what == "task":
        return state.tasks[key].is_terminal
    return state.submissions[key].status.is_final


def _check_outbox(state: SessionState, commit: Commit) -> None:
    ids = [message.id for message in commit.outbox]
    if len(ids) != len(set(ids)):
        raise InvalidInput("a commit may not add two outbox messages with the same id")
    for message_id in ids:
        if message_id in state.outbox and message_id not in commit.outbox_done:
            raise AlreadyExists(f"outbox message {message_id!r} is already pending")


def _check_applied(state: SessionState, commit: Commit) -> None:
    ids = commit.applied_operations
    if len(ids) != len(set(ids)):
        raise InvalidInput("a commit may not apply the same operation twice")
    for operation_id in ids:
        if operation_id in state.applied_operations:
            raise AlreadyApplied(
                f"operation {operation_id!r} was already applied to session "
                f"{state.session_id}; results enter a session once",
                operation_id=operation_id,
            )


def _write_document(current: Document | None, write: DocumentWrite, at: datetime) -> Document:
    # Replay must be deterministic: the time comes from the record, not the clock.
    version = 1 if current is None else current.version + 1
    if isinstance(write, DocumentPut):
        body = write.body
        kind = write.kind
    else:
        assert current is not None  # checked: patches need an existing document
        body = merge_patch(current.body, write.patch)
        kind = current.kind
    return Document(name=write.name, kind=kind, version=version, body=body, updated_at=at)
