"""Submissions: client inputs accepted under an idempotency key (``request_id``)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, JsonValue

from contracts.errors import ErrorInfo
from contracts.model import AwareDatetime, Frozen, Identifier, KindName, RequestId, utcnow
from contracts.question import AnswerInput
from contracts.usage import Budget


class SubmissionStatus(StrEnum):
    ACCEPTED = "accepted"
    PROCESSING = "processing"
    ANSWERED = "answered"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({SubmissionStatus.ANSWERED, SubmissionStatus.FAILED, SubmissionStatus.CANCELLED})


class InputPolicy(StrEnum):
    """What happens to a message for a conversation whose agent is still working on an
    earlier one (``docs/session-api.md``, "Messages while an agent runs")."""

    ENQUEUE = "enqueue"  # the running agent sees it at its next model call, in order
    INTERRUPT = "interrupt"  # its running model call is abandoned; the next includes it
    REJECT = "reject"  # refused: answered as failed (``busy``), not added to the conversation


class Handling(StrEnum):
    """How a submission was taken in (shown in the view)."""

    STARTED = "started"  # it started a task of its own
    ENQUEUED = "enqueued"  # joined the agent already running in its conversation
    INTERRUPTED = "interrupted"  # joined it and abandoned its running model call
    REJECTED = "rejected"  # refused under the reject policy


class SubmittedTask(Frozen):
    """A task a client asks for by kind and version; the kernel chooses its id and phase."""

    kind: KindName
    version: int = Field(default=1, ge=1)
    input: JsonValue = None


class TextInput(Frozen):
    """A message for the session's agent: ``{"text": "..."}`` (or just the string)."""

    text: str
    #: the model configuration that must answer (a Brain offers its model by name);
    #: None: any Brain with a model
    model: str | None = None
    #: what to do if the conversation's agent is still running (None: the session's
    #: default, else ``enqueue``)
    policy: InputPolicy | None = None
    #: a bound on the model use of the agent task that answers it
    budget: Budget | None = None


class TaskInput(Frozen):
    """A task to run directly: ``{"task": {"kind": ..., "version": ..., "input": ...}}``."""

    task: SubmittedTask


#: What a client may submit: a string or ``TextInput`` for the agent, or a ``TaskInput``;
#: an ``AnswerInput`` (``contracts.question``) answers a question of a waiting task.
SubmissionInput = str | TextInput | TaskInput | AnswerInput


class Submission(Frozen):
    """An accepted client input; ``rev`` counts its revisions from 1."""

    request_id: RequestId
    conversation_id: Identifier = "main"
    input: JsonValue = None
    status: SubmissionStatus = SubmissionStatus.ACCEPTED
    task_id: Identifier | None = None
    #: how it was taken in: its own task, or joining (and maybe interrupting) a running one
    handling: Handling | None = None
    answer: JsonValue = None
    error: ErrorInfo | None = None
    rev: int = Field(default=1, ge=1)
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)
