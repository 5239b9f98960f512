"""Tasks: durable state machines driven by the Brain, one commit per phase outcome."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, JsonValue, model_validator

from contracts.errors import ErrorInfo
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow
from contracts.question import Answer, Question
from contracts.usage import Usage


class TaskStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SLEEPING = "sleeping"
    COMPLETING = "completing"
    TERMINAL = "terminal"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JoinPolicy(StrEnum):
    ALL_SETTLED = "allSettled"
    FAIL_FAST = "failFast"


class WaitCondition(Frozen):
    """What a waiting task waits on, how the waits combine, and where it goes next. A
    ``question`` waits for a person's answer (``contracts.question``)."""

    tasks: tuple[Identifier, ...] = ()
    operations: tuple[Identifier, ...] = ()
    join: JoinPolicy = JoinPolicy.ALL_SETTLED
    question: Question | None = None
    next_phase: str

    @model_validator(mode="after")
    def _not_empty(self) -> WaitCondition:
        if not self.tasks and not self.operations and self.question is None:
            raise ValueError("a wait condition must name a task, an operation or a question")
        return self


class SleepCondition(Frozen):
    """A sleeping task wakes at ``until`` (UTC) and enters ``next_phase``."""

    until: AwareDatetime
    next_phase: str


class Parked(Frozen):
    """A waiting task whose operation's outcome is unknown and cannot be checked: it waits
    for an operator's decision, recorded on the operation."""

    operation_id: Identifier
    reason: str


class Task(Frozen):
    """A durable state machine.

    ``rev`` counts this record's revisions (1 on creation, +1 on every update in a
    commit); ``version`` is the version of the handler code for ``kind``. ``attempts``
    counts starts of the current ``phase``; ``crashes`` counts those starts that left no
    outcome (the process running them died); the kernel resets both when the phase
    changes. ``parked`` is set while the task waits on an uncertain operation. ``memo``
    is the task's own durable scratch data, carried from phase to phase. ``answers``
    holds how the questions it asked were settled, by question id (one each: the first
    accepted answer). A ``completing`` task has decided its ``outcome`` and waits for
    the tasks it owns to settle. ``settled_by`` names the runner incarnation that
    decided the outcome.
    """

    id: Identifier
    kind: str
    version: int = Field(default=1, ge=1)
    input: JsonValue = None
    parent_id: Identifier | None = None
    owner_id: Identifier | None = None
    status: TaskStatus = TaskStatus.PENDING
    phase: str = "start"
    rev: int = Field(default=1, ge=1)
    attempts: int = Field(default=0, ge=0)
    crashes: int = Field(default=0, ge=0)
    retry_at: AwareDatetime | None = None
    wait: WaitCondition | None = None
    sleep: SleepCondition | None = None
    parked: Parked | None = None
    memo: dict[str, JsonValue] = Field(default_factory=dict)
    answers: dict[Identifier, Answer] = Field(default_factory=dict)
    #: what this task's own model calls used (``contracts.usage``)
    usage: Usage = Field(default_factory=Usage)
    cancel_requested: bool = False
    outcome: Outcome | None = None
    result: JsonValue = None
    error: ErrorInfo | None = None
    reason: str | None = None
    settled_by: str | None = None
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _status_fields(self) -> Task:
        if (self.status is TaskStatus.WAITING) != (self.wait is not None):
            raise ValueError("a task has a wait condition exactly when it is waiting")
        if (self.status is TaskStatus.SLEEPING) != (self.sleep is not None):
            raise ValueError("a task has a sleep condition exactly when it is sleeping")
        if self.parked is not None and self.status is not TaskStatus.WAITING:
            raise ValueError("only a waiting task can be parked")
        decided = self.status in (TaskStatus.TERMINAL, TaskStatus.COMPLETING)
        if decided != (self.outcome is not None):
            raise ValueError("a task has an outcome exactly when it is completing or terminal")
        return self

    @property
    def is_terminal(self) -> bool:
        return self.status is TaskStatus.TERMINAL

    @property
    def question(self) -> Question | None:
        """The question this task waits to have answered (None: it waits for none)."""
        if self.wait is None or self.wait.question is None:
            return None
        return None if self.wait.question.id in self.answers else self.wait.question
