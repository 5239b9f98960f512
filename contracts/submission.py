"""Submissions: client inputs accepted under an idempotency key (``request_id``)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, JsonValue

from contracts.errors import ErrorInfo
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow


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


class Submission(Frozen):
    """An accepted client input; ``rev`` counts its revisions from 1."""

    request_id: Identifier
    conversation_id: Identifier = "main"
    input: JsonValue = None
    status: SubmissionStatus = SubmissionStatus.ACCEPTED
    task_id: Identifier | None = None
    answer: JsonValue = None
    error: ErrorInfo | None = None
    rev: int = Field(default=1, ge=1)
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)
