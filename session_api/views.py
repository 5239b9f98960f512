"""The Session API's wire models: what its routes accept and answer (pure data).

Shared by the server (``session_api``) and its client (``bh.session_client``). Requests
forbid unknown fields, so a misspelt field is an error that names it, never ignored.
The same task, submission and entry views appear in a session's view and in the
``commit`` events of its stream, so a client keeps a view current by merging them.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, Literal

from pydantic import Field, JsonValue, field_validator

from contracts import (
    Answer,
    Budget,
    EntryKind,
    ErrorInfo,
    Handling,
    InputPolicy,
    JoinPolicy,
    OperationStatus,
    Outcome,
    Parked,
    Question,
    ReplayPolicy,
    SubmissionStatus,
    TaskStatus,
    Usage,
)
from contracts.model import Frozen
from contracts.question import RESERVED_ACTORS, reserved_actor
from contracts.usage import SessionUsage
from contracts.workspace import WorkspaceRetention

#: The reason recorded when a cancel request gives none.
DEFAULT_CANCEL_REASON: Final = "cancelled via the Session API"
#: Names of the events of ``GET /v1/sessions/{id}/events``.
VIEW_EVENT: Final = "view"
COMMIT_EVENT: Final = "commit"
ERROR_EVENT: Final = "error"
PREVIEW_EVENT: Final = "preview"


class Health(Frozen):
    status: Literal["ok"] = "ok"


# -- requests -------------------------------------------------------------------------


class SubmitRequest(Frozen):
    """Input for a session, accepted once per ``request_id`` (the idempotency key).

    ``input`` is a string or ``{"text": "..."}`` for the session's agent, or
    ``{"task": {"kind", "version", "input"}}`` to run a task directly. The ids are
    checked by the store's intake rules (1-128 of ``A-Z a-z 0-9 . _ : @ -``, starting
    with a letter or digit), which name the field that is wrong.
    """

    request_id: str = Field(max_length=1000)
    input: JsonValue
    conversation_id: str = Field(default="main", max_length=1000)


class CancelRequest(Frozen):
    """Cancel a submission (``request_id``) or one task (``task_id``): exactly one."""

    request_id: str | None = Field(default=None, max_length=1000)
    task_id: str | None = Field(default=None, max_length=1000)
    reason: str = Field(default=DEFAULT_CANCEL_REASON, min_length=1, max_length=1000)


class ForkRequest(Frozen):
    """Start session ``into`` as this session was right after commit ``at``."""

    at: int = Field(ge=1)
    into: str = Field(max_length=1000)


#: said with every fork: a fork replays nothing that happened outside the store
FORK_NOTE: Final = (
    "external actions that already happened are not undone: operations committed before "
    "the fork point keep their results in the fork; any new operation runs anew"
)


class ForkView(Frozen):
    """A fork: session ``session_id`` (at ``seq``) starts as ``origin`` was after ``at``."""

    session_id: str
    origin: str
    at: int
    seq: int
    active: bool
    note: str = FORK_NOTE


class AnswerRequest(Frozen):
    """An answer to the open question ``question_id`` of a waiting task, accepted once
    per ``request_id``. ``value`` must fit the question (a string; one of its choices;
    JSON fitting its schema; ``"approve"`` or ``"deny"`` for an approval). The answer is
    recorded as given by the API token's name; ``by`` is a name the answerer gives,
    kept beside it as ``claimed_by`` and not verified (``deadline`` and ``kernel`` are
    refused); ``why`` is recorded with it."""

    request_id: str = Field(max_length=1000)
    question_id: str = Field(max_length=1000)
    value: JsonValue
    by: str | None = Field(default=None, min_length=1, max_length=200)
    why: str | None = Field(default=None, max_length=4000)

    @field_validator("by")
    @classmethod
    def _not_reserved(cls, name: str | None) -> str | None:
        if name in RESERVED_ACTORS:
            raise ValueError(reserved_actor(name))
        return name


class BudgetRequest(Frozen):
    """The session's model budget (null: none): ``{"tokens"?, "cost"?, "on_exceed"}``."""

    budget: Budget | None


class RetentionRequest(Frozen):
    """How many of its latest workspace versions the session keeps from collection (null:
    back to the default, 10): ``{"keep_versions": N}``, 1 to 100,000."""

    retention: WorkspaceRetention | None


class InputPolicyRequest(Frozen):
    """The session's default for messages that arrive while its agent runs (null: back
    to ``enqueue``); a message's own ``policy`` comes first."""

    policy: InputPolicy | None


# -- records --------------------------------------------------------------------------


class SubmissionView(Frozen):
    request_id: str
    conversation_id: str
    status: SubmissionStatus
    task_id: str | None = None
    #: how it was taken in: ``started`` its own task, ``enqueued`` / ``interrupted``
    #: joined the agent running in its conversation, ``rejected``
    handling: Handling | None = None
    input: JsonValue = None
    answer: JsonValue = None
    error: ErrorInfo | None = None
    rev: int
    created_at: datetime
    updated_at: datetime


class WaitView(Frozen):
    """What a waiting task waits on, how the waits combine, and the phase it enters next."""

    tasks: list[str] = Field(default_factory=list)
    operations: list[str] = Field(default_factory=list)
    join: JoinPolicy
    #: the person's answer it waits for (``contracts.question``)
    question: Question | None = None
    next_phase: str


class TaskView(Frozen):
    """A task as its state machine stands: ``blocked`` says why no Brain can run it."""

    id: str
    kind: str
    version: int
    parent_id: str | None = None
    owner_id: str | None = None
    status: TaskStatus
    phase: str
    rev: int
    attempts: int
    crashes: int
    wait: WaitView | None = None
    sleep_until: datetime | None = None
    next_phase: str | None = None
    parked: Parked | None = None
    blocked: str | None = None
    #: it waits for a person to answer ``wait.question``
    waiting_for_input: bool = False
    #: how its questions were settled, by question id
    answers: dict[str, Answer] = Field(default_factory=dict)
    #: what its own model calls used
    usage: Usage = Usage()
    cancel_requested: bool = False
    outcome: Outcome | None = None
    result: JsonValue = None
    error: ErrorInfo | None = None
    reason: str | None = None
    created_at: datetime
    updated_at: datetime


class ResultSummary(Frozen):
    """How an operation ended; the full result is on the Hands API."""

    succeeded: bool
    termination: str | None = None
    exit_code: int | None = None
    error: ErrorInfo | None = None
    finished_at: datetime
    #: how it was reached: ``executed``, ``verified``, ``replayed``, ``reused``...
    path: str | None = None
    #: the container that ran it (a Hands' run)
    container: str | None = None
    started_at: datetime | None = None


class OperationView(Frozen):
    """An operation of the session, as its executor recorded it; ``applied`` says its
    result entered the session."""

    operation_id: str
    task_id: str | None = None
    tool: str
    tool_version: int | None = None
    replay: ReplayPolicy
    status: OperationStatus
    attempts: int
    executor: str | None = None
    deadline: datetime | None = None
    reason: str | None = None
    decided_by: str | None = None
    decision: str | None = None
    applied: bool = False
    result: ResultSummary | None = None
    created_at: datetime
    updated_at: datetime


class DecisionView(Frozen):
    """How an operator settled one of the session's ``uncertain`` operations."""

    outcome: Literal["succeeded", "failed"]
    decided_by: str | None = None
    decision: str | None = None
    decided_at: datetime | None = None


class EntryView(Frozen):
    """An entry with its content shortened to one line (``text``); ``index`` is its
    position in the session's history (unknown in commit events)."""

    index: int | None = None
    id: str
    kind: EntryKind
    conversation_id: str
    task_id: str | None = None
    operation_id: str | None = None
    text: str
    created_at: datetime


class BlockedTask(Frozen):
    """A task whose kind/version no running Brain has a handler (or migration) for."""

    task_id: str
    kind: str | None = None
    version: int | None = None
    reason: str


class OutboxView(Frozen):
    id: str
    topic: str


class Archived(Frozen):
    """How much settled history left the state for the archive (not listed here)."""

    entries: int = 0
    tasks: int = 0
    submissions: int = 0


# -- answers --------------------------------------------------------------------------


class SessionView(Frozen):
    """A session as of commit ``seq``: open work and the recent window (submissions and
    tasks settled before the last baseline are archived, counted in ``archived``).

    ``operations`` are the open ones and the most recent settled ones
    (``operations_total`` counts all); ``entries`` the last few of ``entry_count``.
    ``cancel_requests`` / ``cancel_tasks`` are cancellations recorded and not yet
    necessarily acted on.
    """

    session_id: str
    seq: int
    fence: int
    holder: str | None = None
    updated_at: datetime | None = None
    active: bool
    submissions: list[SubmissionView]
    tasks: list[TaskView]
    operations: list[OperationView]
    operations_total: int
    entries: list[EntryView]
    entry_count: int
    blocked: list[BlockedTask]
    #: the open questions of its waiting tasks, oldest first
    questions: list[QuestionView] = Field(default_factory=list)
    #: text its running tasks are streaming, as last saved (never an answer)
    previews: list[PreviewView] = Field(default_factory=list)
    #: the session's default for messages that arrive while its agent runs
    input_policy: InputPolicy = InputPolicy.ENQUEUE
    #: what its model calls used (total and by model), and its budget if one is set
    usage: SessionUsage = SessionUsage()
    budget: Budget | None = None
    #: how many of its latest workspace versions it keeps from collection
    retention: WorkspaceRetention = WorkspaceRetention()
    cancel_requests: dict[str, str] = Field(default_factory=dict)
    cancel_tasks: dict[str, str] = Field(default_factory=dict)
    #: operators' decisions on its uncertain operations, by operation id
    decisions: dict[str, DecisionView] = Field(default_factory=dict)
    outbox: list[OutboxView] = Field(default_factory=list)
    archived: Archived = Archived()
    problems: list[str] = Field(default_factory=list)


class PreviewView(Frozen):
    """Text a running task has streamed so far, as last saved by a deferred commit (the
    ``data`` of a ``preview`` event, sent before the commit that saved it). A preview is
    a snapshot: the next one replaces it, one may be lost, and it is never an answer —
    the task's response entry is. ``removed``: the task's outcome superseded it. A
    ``tool_output`` preview is the end of a running operation's log (``chars``: bytes
    written in all), read from its executor's saved preview; it has no commit of its
    own (``seq`` is the stream's position) and is removed once the result is applied."""

    preview: Literal[True] = True
    #: ``text``: a model's streamed answer; ``tool_output``: a running operation's log
    kind: Literal["text", "tool_output"] = "text"
    session_id: str
    seq: int
    task_id: str
    operation_id: str | None = None
    request: str | None = None
    text: str = ""
    #: characters streamed (``text`` keeps the first ones when ``truncated``)
    chars: int = 0
    truncated: bool = False
    at: datetime | None = None
    removed: bool = False

    @property
    def key(self) -> str:
        """What a newer preview replaces: the operation's, else the task's text."""
        return self.operation_id or self.task_id


class QuestionView(Frozen):
    """An open question and the task that waits for its answer."""

    task_id: str
    question: Question


class InboxItem(Frozen):
    """An open question of one session (``GET /v1/questions``)."""

    session_id: str
    task_id: str
    question: Question


class Inbox(Frozen):
    """Open questions across the active sessions the token covers, oldest first;
    ``truncated``: more active sessions exist than were read."""

    questions: list[InboxItem]
    truncated: bool = False


class SessionSummary(Frozen):
    """A session at a glance; ``problem`` says why it could not be loaded."""

    session_id: str
    seq: int
    holder: str | None = None
    updated_at: datetime | None = None
    active: bool
    open_tasks: int
    open_submissions: int
    blocked: int
    #: open questions (tasks waiting for a person's answer)
    waiting_for_input: int = 0
    #: the kinds of its root tasks (the work asked for) in its recent window
    kinds: list[str] = Field(default_factory=list)
    problem: str | None = None


class SessionStatus(StrEnum):
    """What a list of sessions may be narrowed to."""

    ACTIVE = "active"
    FINISHED = "finished"
    BLOCKED = "blocked"
    WAITING_FOR_INPUT = "waiting_for_input"


class SessionList(Frozen):
    """Sessions of the active index (or, listing every session, of the directory);
    ``truncated``: there are more than ``limit``; ``next_after``: listing every session,
    the ``after`` of the next page."""

    sessions: list[SessionSummary]
    truncated: bool = False
    next_after: str | None = None


class CancelAccepted(Frozen):
    """A cancellation: ``recorded`` when this request wrote it to the session's control
    document; not when it was already recorded, or the target is already final."""

    session_id: str
    request_id: str | None = None
    task_id: str | None = None
    reason: str
    recorded: bool
    #: the target's status now (a submission's or a task's)
    status: str


class CommitEvent(Frozen):
    """What one commit changed (the ``data`` of a ``commit`` event, whose id is ``seq``).

    Tasks and submissions are their whole new revisions (merge them by id); entries
    are shortened; ``documents`` names the documents written; ``outbox`` the messages
    recorded for sending. A ``claim`` commit only raised the fence for ``holder``.
    """

    session_id: str
    seq: int
    committed_at: datetime
    fence: int
    claim: bool = False
    holder: str | None = None
    writer: str = ""
    tasks: list[TaskView] = Field(default_factory=list)
    submissions: list[SubmissionView] = Field(default_factory=list)
    entries: list[EntryView] = Field(default_factory=list)
    documents: list[str] = Field(default_factory=list)
    applied_operations: list[str] = Field(default_factory=list)
    #: operators' decisions this commit recorded (settled operations), by operation id
    decisions: dict[str, DecisionView] = Field(default_factory=dict)
    outbox: list[OutboxView] = Field(default_factory=list)
    outbox_done: list[str] = Field(default_factory=list)
