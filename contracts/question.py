"""Questions a task asks a person, and their answers.

A phase that needs human input returns a wait on a ``Question``: the question is
committed with the wait, and the task holds no Brain while it waits. An answer arrives
as a submission (``AnswerInput``) through the Session API, accepted once per request id;
the lease holder applies the first accepted answer to the waiting task in one commit
(the answer on the task, the task entering its next phase, the submission answered) and
answers every later one as refused. An **approval** is a question about one tool call,
asked before its intent exists: nothing is dispatched until it is approved.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

import jsonschema
from pydantic import Field, JsonValue, field_validator, model_validator

from contracts.model import AwareDatetime, Frozen, Identifier, utcnow

APPROVE: Final = "approve"
DENY: Final = "deny"
#: who answers a question whose deadline passed under ``on_deadline="deny"``
BY_DEADLINE: Final = "deadline"
#: who closes a question whose task ended before it was answered
BY_KERNEL: Final = "kernel"
#: names only the kernel records: no answer may be given by (or claim) them
RESERVED_ACTORS: Final = frozenset({BY_DEADLINE, BY_KERNEL})


class QuestionKind(StrEnum):
    TEXT = "text"  # any string
    CHOICE = "choice"  # one of ``choices``
    JSON = "json"  # any JSON value that fits ``answer_schema``
    APPROVAL = "approval"  # "approve" or "deny" one tool call (``call``)


class OnDeadline(StrEnum):
    DENY = "deny"  # answered by the deadline: "deny" (approvals) or no answer (others)
    ESCALATE = "escalate"  # asked again of ``escalate_to``, without a deadline


class PendingCall(Frozen):
    """The tool call an approval decides: exactly what would run if approved."""

    tool: str
    version: int = 1
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    operation_id: Identifier


class Question(Frozen):
    """What a waiting task asks, of whom, and until when."""

    id: Identifier
    prompt: str = Field(min_length=1, max_length=4000)
    kind: QuestionKind = QuestionKind.TEXT
    choices: tuple[str, ...] = ()
    answer_schema: dict[str, JsonValue] | None = None
    call: PendingCall | None = None
    #: the named queue of people who answer it (an approval inbox, a team)
    queue: Identifier = "default"
    deadline: AwareDatetime | None = None
    on_deadline: OnDeadline = OnDeadline.DENY
    escalate_to: Identifier | None = None
    asked_at: AwareDatetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _shape(self) -> Question:
        if (self.kind is QuestionKind.CHOICE) != bool(self.choices):
            raise ValueError("a question has choices exactly when it is a choice")
        if (self.kind is QuestionKind.APPROVAL) != (self.call is not None):
            raise ValueError("a question names a tool call exactly when it is an approval")
        if self.answer_schema is not None and self.kind is not QuestionKind.JSON:
            raise ValueError("only a json question has an answer schema")
        if (self.on_deadline is OnDeadline.ESCALATE) != (self.escalate_to is not None):
            raise ValueError("escalate_to is given exactly when on_deadline is escalate")
        return self

    def problem(self, value: Any) -> str | None:
        """None when ``value`` answers this question; else what is wrong with it."""
        if self.kind is QuestionKind.TEXT:
            ok = isinstance(value, str) and 0 < len(value) <= 100_000
            return None if ok else "the answer must be a non-empty string (at most 100,000)"
        if self.kind is QuestionKind.CHOICE:
            ok = value in self.choices
            return None if ok else f"the answer must be one of {list(self.choices)}"
        if self.kind is QuestionKind.APPROVAL:
            ok = value in (APPROVE, DENY)
            return None if ok else f"the answer must be {APPROVE!r} or {DENY!r}"
        return _schema_problem(self.answer_schema or {}, value)


def _schema_problem(schema: dict[str, Any], value: Any) -> str | None:
    validator = jsonschema.Draft202012Validator(schema)
    problems = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not problems:
        return None
    where = "/".join(str(part) for part in problems[0].absolute_path) or "(top level)"
    return f"the answer is invalid at {where}: {problems[0].message}"


class Answer(Frozen):
    """How a question was settled: the first accepted answer, the deadline's, or
    ``closed`` (its task ended first; ``why`` says how)."""

    question_id: Identifier
    value: JsonValue = None
    #: who answered: the name of the API token the answer came with (verified), or the
    #: kernel's own ``deadline`` / ``kernel``
    by: str = Field(min_length=1, max_length=200)
    #: the name the answerer gave for themselves (not verified: any operator token can
    #: give any name; ``by`` is who really answered)
    claimed_by: str | None = Field(default=None, max_length=200)
    why: str | None = Field(default=None, max_length=4000)
    #: the submission that carried it (None when the deadline answered)
    request_id: str | None = None
    closed: bool = False
    #: when it was settled (the deadline's answer: at the deadline)
    answered_at: AwareDatetime = Field(default_factory=utcnow)

    @property
    def approved(self) -> bool:
        return self.value == APPROVE


class ApprovalRule(Frozen):
    """Which tool calls need a person's approval before their intent is committed, and
    how the approval is asked: of ``queue``, within ``within_s`` seconds (None: no
    deadline), then ``on_deadline``. ``when`` is a JSON Schema the call's arguments
    must fit for the rule to apply (None: every call of ``tool``; ``"*"``: any tool)."""

    tool: str = Field(min_length=1, max_length=200)
    when: dict[str, JsonValue] | None = None
    queue: Identifier = "approvals"
    within_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    on_deadline: OnDeadline = OnDeadline.DENY
    escalate_to: Identifier | None = None

    @model_validator(mode="after")
    def _escalation(self) -> ApprovalRule:
        if (self.on_deadline is OnDeadline.ESCALATE) != (self.escalate_to is not None):
            raise ValueError("escalate_to is given exactly when on_deadline is escalate")
        if self.when is not None:
            jsonschema.Draft202012Validator.check_schema(self.when)
        return self

    @classmethod
    def parse(cls, text: str) -> ApprovalRule:
        """``TOOL`` (every call) or the rule as JSON."""
        text = text.strip()
        return cls.model_validate_json(text) if text.startswith("{") else cls(tool=text)

    def applies(self, tool: str, arguments: dict[str, Any]) -> bool:
        if self.tool not in ("*", tool):
            return False
        return self.when is None or _schema_problem(self.when, arguments) is None


class AnswerBody(Frozen):
    """What an answer submission carries: ``{"answer": {...}}``, as the door wrote it.

    ``by`` is who answered as the door authenticated them (the API token's name);
    ``claimed_by`` the name they gave (unverified). ``accepted_at`` is the store's time
    when the door accepted it (``session_store.clock``): the door writes it, no client
    can (the submissions door refuses answers), and the kernel judges a deadline by it.
    """

    question_id: Identifier
    value: JsonValue = None
    by: str = Field(min_length=1, max_length=200)
    claimed_by: str | None = Field(default=None, min_length=1, max_length=200)
    why: str | None = Field(default=None, max_length=4000)
    accepted_at: AwareDatetime | None = None

    @field_validator("by", "claimed_by")
    @classmethod
    def _not_reserved(cls, name: str | None) -> str | None:
        if name in RESERVED_ACTORS:
            raise ValueError(reserved_actor(name))
        return name


def reserved_actor(name: str) -> str:
    """Why ``name`` cannot be given as who answers."""
    return (
        f"{name!r} is reserved: the kernel records answers by {sorted(RESERVED_ACTORS)} "
        "itself; give a person's name"
    )


class AnswerInput(Frozen):
    """A submission that answers a question of a waiting task."""

    answer: AnswerBody
