"""What a phase handler returns: the next state of its task, as data.

A handler never writes to the store. It returns one of these outcomes, and the kernel
turns it — together with its ``Effects`` — into one atomic commit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, JsonValue

from contracts import (
    DocumentWrite,
    Entry,
    ErrorInfo,
    Intent,
    JoinPolicy,
    ModelUsage,
    OutboxMessage,
    Parked,
    Question,
)
from contracts.model import AwareDatetime, Frozen, Identifier
from contracts.workspace import WorkspaceVersion


class TaskSpec(Frozen):
    """A task to create in the same commit as the outcome that asks for it.

    ``id`` is chosen by the handler: unique within the session (ids of settled tasks
    included); the store refuses a duplicate, which fails the task that asked for it.
    """

    id: Identifier
    kind: str
    version: int = Field(default=1, ge=1)
    input: JsonValue = None
    phase: str = "start"


class Effects(Frozen):
    """Writes that land atomically with the outcome: entries, documents, new subtasks,
    outbox messages, applied operation results, changes to the task's memo, and the
    usage of a model call."""

    entries: tuple[Entry, ...] = ()
    documents: tuple[DocumentWrite, ...] = ()
    spawn: tuple[TaskSpec, ...] = ()
    outbox: tuple[OutboxMessage, ...] = ()
    applied_operations: tuple[Identifier, ...] = ()
    #: the committed tool calls the outbox's dispatches carry (``contracts.intent``)
    intents: tuple[Intent, ...] = ()
    memo: dict[str, JsonValue] = Field(default_factory=dict)
    #: a model call's usage: summed on the task and the session's usage document
    usage: ModelUsage | None = None
    #: the workspace version an applied result produced: the session's new head (the
    #: drive sets it from the results the outcome applies)
    workspace: WorkspaceVersion | None = None


class Next(Frozen):
    """Continue with ``phase`` (the kernel runs it right away)."""

    type: Literal["next"] = "next"
    phase: str
    effects: Effects = Field(default_factory=Effects)


class Wait(Frozen):
    """Wait for tasks, operation results and/or a person's answer to ``question``, then
    enter ``next_phase`` (where ``PhaseContext.answer`` reads the answer). ``parked``
    marks a wait on an operation whose outcome only an operator can decide."""

    type: Literal["wait"] = "wait"
    tasks: tuple[Identifier, ...] = ()
    operations: tuple[Identifier, ...] = ()
    join: JoinPolicy = JoinPolicy.ALL_SETTLED
    question: Question | None = None
    next_phase: str
    reason: str | None = None
    parked: Parked | None = None
    effects: Effects = Field(default_factory=Effects)


class Sleep(Frozen):
    """Sleep until ``until`` (UTC, this host's clock), then enter ``next_phase``."""

    type: Literal["sleep"] = "sleep"
    until: AwareDatetime
    next_phase: str
    effects: Effects = Field(default_factory=Effects)


class Done(Frozen):
    type: Literal["done"] = "done"
    result: JsonValue = None
    effects: Effects = Field(default_factory=Effects)


class Fail(Frozen):
    type: Literal["fail"] = "fail"
    error: ErrorInfo
    effects: Effects = Field(default_factory=Effects)


class Retry(Frozen):
    """Run this phase again after a backoff (the kind's, unless ``delay`` is given)."""

    type: Literal["retry"] = "retry"
    reason: str
    delay: timedelta | None = None
    effects: Effects = Field(default_factory=Effects)


PhaseOutcome = Next | Wait | Sleep | Done | Fail | Retry
