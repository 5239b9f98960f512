"""The materialised state of a session and the pure rules that advance it by a commit.

``check`` validates a commit against a state without changing it (the store adds the
checks that need the archive, ``session_store.archive``); ``apply`` then changes the
state. The handle runs ``check`` before writing and ``apply`` only after
the store confirmed the write (persist, then adopt); loading replays the log with the
same ``apply``, so a state built from a baseline plus its tail equals one replayed
from the whole log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from contracts import (
    CONTROL_DOCUMENT,
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
    EntryKind,
    Fork,
    Intent,
    InvalidInput,
    InvalidTransition,
    NotFound,
    Origin,
    OutboxMessage,
    Submission,
    Task,
    VersionMismatch,
    args_digest,
)
from contracts.workspace import WorkspaceVersion


class SessionState(BaseModel):
    """What a session holds after commit ``seq``: its open work and a recent window.

    Settled history leaves the state when a baseline is written (``session_store.archive``):
    entries before ``entries_archived`` live in segment blobs; settled tasks, settled
    submissions and applied-operation marks live in archive items, counted by the
    ``archived_*`` fields. The state therefore stays proportional to open work however
    long the session runs. ``SessionHandle`` reads the archive on demand (``entries()``,
    ``task()``, ``submission()``, ``is_applied()``). ``holder`` names who claimed the
    current fence (None when unknown).
    """

    model_config = ConfigDict(extra="forbid")

    v: Literal[1] = 1
    type: Literal["state"] = "state"
    session_id: str
    seq: int = 0
    fence: int = 0
    holder: str | None = None
    updated_at: datetime | None = None
    entry_count: int = 0
    entries_archived: int = 0
    entries_tail: list[Entry] = Field(default_factory=list)
    archived_tasks: int = 0
    archived_submissions: int = 0
    archived_applied: int = 0
    documents: dict[str, Document] = Field(default_factory=dict)
    tasks: dict[str, Task] = Field(default_factory=dict)
    submissions: dict[str, Submission] = Field(default_factory=dict)
    outbox: dict[str, OutboxMessage] = Field(default_factory=dict)
    applied_operations: set[str] = Field(default_factory=set)
    #: committed tool calls without an applied result, by operation id (the Hands run
    #: only these; the scheduler re-issues them when their dispatch was lost)
    intents: dict[str, Intent] = Field(default_factory=dict)
    #: a forked session's history before its first commit (``contracts.Origin``)
    origin: Origin | None = None
    #: the workspace's head: the version the last applied write produced (None: empty)
    workspace: WorkspaceVersion | None = None

    # Counts of non-final tasks and submissions, kept by ``apply`` so that activity
    # checks cost O(commit), not O(session).
    _open_tasks: int = PrivateAttr(default=0)
    _open_submissions: int = PrivateAttr(default=0)

    def model_post_init(self, context: Any, /) -> None:
        self._open_tasks = sum(1 for task in self.tasks.values() if not task.is_terminal)
        self._open_submissions = sum(
            1 for sub in self.submissions.values() if not sub.status.is_final
        )

    @property
    def has_archive(self) -> bool:
        """Whether records left this state for the archive (checks must look there too)."""
        return bool(self.archived_tasks or self.archived_submissions or self.archived_applied)

    @property
    def is_active(self) -> bool:
        """True while anything is left to do: open tasks, open submissions, unsent outbox."""
        counts = _counts(self)
        return bool(
            counts["_open_tasks"] or counts["_open_submissions"] or self.outbox or self.intents
        )

    def snapshot(self) -> SessionState:
        """A copy whose containers are independent of this state (records are frozen)."""
        return self.model_copy(
            update={
                "entries_tail": list(self.entries_tail),
                "documents": dict(self.documents),
                "tasks": dict(self.tasks),
                "submissions": dict(self.submissions),
                "outbox": dict(self.outbox),
                "applied_operations": set(self.applied_operations),
                "intents": dict(self.intents),
            }
        )


def check(state: SessionState, commit: Commit, *, fenced: bool) -> None:
    """Raise if ``commit`` cannot follow ``state``; never changes ``state``."""
    if commit.fork is not None:
        if state.seq != 0:
            raise AlreadyExists(
                f"session {state.session_id!r} already has {state.seq} commits: a fork "
                "creates a new session",
                key=state.session_id,
            )
        if commit.model_copy(update={"fork": None}) != Commit():
            raise InvalidInput("a fork commit carries nothing but the fork")
    if not fenced:
        check_ingress(commit)
    _check_entries(commit)
    _check_documents(state, commit.documents)
    _check_revisions("task", state.tasks, commit.tasks)
    _check_revisions("submission", state.submissions, commit.submissions)
    _check_outbox(state, commit)
    _check_applied(state, commit)
    _check_intents(state, commit)
    _check_workspace(state, commit)


def forked(origin: SessionState, session_id: str, fork: Fork) -> SessionState:
    """The state a session forked from ``origin`` (as it was after ``fork.seq``) starts
    from, before its fork commit: the origin's open work, recent window and documents;
    none of its lease (fence, holder) and none of its unsent messages (the origin's
    relay sends those; the reconciler re-issues what the fork's own intents need)."""
    adopted = origin.model_copy(deep=True)
    adopted.session_id = session_id
    adopted.seq, adopted.fence, adopted.holder = 0, 0, None
    adopted.outbox = {}
    adopted.origin = Origin(
        session_id=fork.session_id,
        seq=fork.seq,
        entries_archived=origin.entries_archived,
        operations=tuple(sorted({*origin.intents, *origin.applied_operations})),
        origin=origin.origin,
    )
    adopted.model_post_init(None)
    return adopted


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
    # The scalars are written to the state's fields directly: pydantic's ``__setattr__``
    # validates nothing on this model and costs about 0.7 µs a field, five a commit.
    fields = state.__dict__
    state.entries_tail.extend(commit.entries)
    fields["entry_count"] += len(commit.entries)
    for write in commit.documents:
        state.documents[write.name] = _write_document(
            state.documents.get(write.name), write, record.committed_at
        )
    open_tasks, open_submissions = _open_deltas(state, commit)
    counts = _counts(state)
    counts["_open_tasks"] += open_tasks
    counts["_open_submissions"] += open_submissions
    for task in commit.tasks:
        state.tasks[task.id] = task
    for submission in commit.submissions:
        state.submissions[submission.request_id] = submission
    if commit.workspace is not None:
        fields["workspace"] = commit.workspace
    for message_id in commit.outbox_done:
        state.outbox.pop(message_id, None)
    for message in commit.outbox:
        state.outbox[message.id] = message
    state.applied_operations.update(commit.applied_operations)
    for intent in commit.intents:
        state.intents[intent.operation_id] = intent
    _drop_intents(state, commit)
    if record.claim:
        fields["holder"] = record.holder
    elif record.fence != state.fence:
        fields["holder"] = None  # raised by a plain commit: nobody is named
    fields["seq"] = record.seq
    fields["fence"] = record.fence
    fields["updated_at"] = record.committed_at


def _counts(state: SessionState) -> dict[str, Any]:
    """The state's private counts of open work, read without pydantic's attribute path
    (reading a private attribute by name costs ~1 µs; a durable phase reads several)."""
    counts = state.__pydantic_private__
    assert counts is not None
    return counts


def active_after(state: SessionState, commit: Commit) -> bool:
    """Whether ``state`` will be active once ``commit`` is applied, without applying it."""
    if commit.outbox:
        return True
    done = sum(1 for message_id in set(commit.outbox_done) if message_id in state.outbox)
    if len(state.outbox) > done:
        return True
    open_tasks, open_submissions = _open_deltas(state, commit)
    counts = _counts(state)
    tasks: int = counts["_open_tasks"] + open_tasks
    submissions: int = counts["_open_submissions"] + open_submissions
    return tasks > 0 or submissions > 0


def _open_deltas(state: SessionState, commit: Commit) -> tuple[int, int]:
    """How ``commit`` changes the counts of open tasks and open submissions."""
    tasks = 0
    for task in commit.tasks:
        before = state.tasks.get(task.id)
        tasks += (not task.is_terminal) - (before is not None and not before.is_terminal)
    subs = 0
    for sub in commit.submissions:
        previous = state.submissions.get(sub.request_id)
        was_open = previous is not None and not previous.status.is_final
        subs += (not sub.status.is_final) - was_open
    return tasks, subs


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


def check_ingress(commit: Commit) -> None:
    """What a writer without a lease fence may commit: new submissions, user input
    entries and merge patches of the control document. Everything else needs a fence,
    so a stale or rogue ingress writer can never rewrite tasks or decisions."""
    problems = []
    if commit.tasks:
        problems.append("tasks")
    if any(sub.rev != 1 for sub in commit.submissions):
        problems.append("changes to existing submissions")
    if any(entry.kind is not EntryKind.USER_INPUT for entry in commit.entries):
        problems.append("entries other than user input")
    if any(
        not isinstance(write, DocumentPatch) or write.name != CONTROL_DOCUMENT
        for write in commit.documents
    ):
        problems.append(f"documents other than patches of {CONTROL_DOCUMENT!r}")
    if commit.outbox or commit.outbox_done:
        problems.append("outbox messages")
    if commit.applied_operations:
        problems.append("applied operations")
    if commit.intents:
        problems.append("intents")
    if commit.workspace is not None:
        problems.append("workspace versions")
    if problems:
        raise InvalidInput(
            f"an unfenced commit (fence=None) may not contain {', '.join(problems)}; "
            "unfenced writers may only add submissions, user input and control-document "
            "patches. Claim the session and commit with its fence.",
            refused=problems,
        )


def _check_entries(commit: Commit) -> None:
    ids = [entry.id for entry in commit.entries]
    if len(ids) != len(set(ids)):
        raise InvalidInput("a commit may not contain two entries with the same id")


def _check_documents(state: SessionState, writes: tuple[DocumentWrite, ...]) -> None:
    versions: dict[str, int] = {}
    for write in writes:
        if write.name not in versions:
            existing = state.documents.get(write.name)
            versions[write.name] = 0 if existing is None else existing.version
        current = versions[write.name]
        if isinstance(write, DocumentPatch) and current == 0 and not write.create:
            raise NotFound(
                f"document {write.name!r} does not exist; create it with a put, or patch "
                "with create=True"
            )
        if write.expected_version is not None and write.expected_version != current:
            raise VersionMismatch(
                f"document {write.name!r} is at version {current}, "
                f"the write expected version {write.expected_version}",
                document=write.name,
                version=current,
                expected=write.expected_version,
            )
        versions[write.name] = current + 1


def _check_revisions(
    what: str,
    current: dict[str, Task] | dict[str, Submission],
    records: tuple[Task, ...] | tuple[Submission, ...],
) -> None:
    seen: set[str] = set()
    for record in records:
        key = record.id if isinstance(record, Task) else record.request_id
        if key in seen:
            raise InvalidInput(f"{what} {key!r} appears twice in one commit")
        seen.add(key)
        existing = current.get(key)
        have = None if existing is None else existing.rev
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
        if existing is not None and _is_final(existing):
            raise InvalidTransition(f"{what} {key!r} is final and cannot change", key=key)


def _is_final(record: Task | Submission) -> bool:
    return record.is_terminal if isinstance(record, Task) else record.status.is_final


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


def _check_intents(state: SessionState, commit: Commit) -> None:
    for intent in commit.intents:
        dispatch = intent.dispatch
        if dispatch.session_id != state.session_id:
            raise InvalidInput(
                f"intent {intent.operation_id} names session {dispatch.session_id}, "
                f"not {state.session_id}"
            )
        if intent.digest != args_digest(dispatch.args):
            raise InvalidInput(f"intent {intent.operation_id}: digest does not match its args")
        current = state.intents.get(intent.operation_id)
        if current is not None and current != intent:
            raise AlreadyExists(
                f"operation {intent.operation_id} already has another committed intent",
                operation_id=intent.operation_id,
            )


def _check_workspace(state: SessionState, commit: Commit) -> None:
    """A version moves the head only if it was made from the head (one writer at a
    time: ``docs/workspaces.md``); its id is its manifest's digest. That the manifest is
    in the store is checked by the log (a read)."""
    version = commit.workspace
    if version is None:
        return
    if version.manifest.digest != version.id:
        raise InvalidInput(
            f"workspace version {version.id} names manifest blob {version.manifest.digest}; "
            "a version's id is its manifest's digest"
        )
    head = None if state.workspace is None else state.workspace.id
    if version.base != head:
        raise ConflictError(
            f"workspace version {version.id} was made from base {version.base or 'empty'}, "
            f"but the session's head is {head or 'the empty workspace'}; reload the session",
            key="workspace",
            base=version.base,
            current=head,
        )


def _drop_intents(state: SessionState, commit: Commit) -> None:
    """An intent ends when its result is applied or its task ends (a cancelled task's
    queued dispatch then matches nothing and never runs)."""
    for operation_id in commit.applied_operations:
        state.intents.pop(operation_id, None)
    ended = {task.id for task in commit.tasks if task.is_terminal}
    if ended and state.intents:
        for operation_id, intent in list(state.intents.items()):
            if intent.task_id in ended:
                del state.intents[operation_id]


def _write_document(current: Document | None, write: DocumentWrite, at: datetime) -> Document:
    # Replay must be deterministic: the time comes from the record, not the clock.
    version = 1 if current is None else current.version + 1
    if isinstance(write, DocumentPut):
        body = write.body
        kind = write.kind
    else:
        body = merge_patch({} if current is None else current.body, write.patch)
        kind = write.kind if current is None else current.kind
    return Document(name=write.name, kind=kind, version=version, body=body, updated_at=at)
