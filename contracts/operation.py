"""Operations: external actions with a stable identity, as the Hands side records them."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final, Literal

from pydantic import Field, JsonValue

from contracts.blob import BlobRef
from contracts.errors import ErrorInfo
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow

OPERATION_RECORD_VERSION: Final = 1


class ReplayPolicy(StrEnum):
    """Whether re-running an operation with unknown outcome is harmless."""

    SAFE = "safe"
    UNSAFE = "unsafe"


class OperationStatus(StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNCERTAIN = "uncertain"
    APPLIED = "applied"


_S = OperationStatus

# The operation state machine as data: status -> statuses it may move to.
# RUNNING -> RUNNING lets a restarted executor re-claim the operation it was running.
OPERATION_TRANSITIONS: Mapping[OperationStatus, frozenset[OperationStatus]] = {
    _S.ACCEPTED: frozenset({_S.RUNNING, _S.CANCELLED, _S.UNCERTAIN}),
    _S.RUNNING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.UNCERTAIN}),
    _S.UNCERTAIN: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset({_S.APPLIED}),
    _S.FAILED: frozenset({_S.APPLIED}),
    _S.CANCELLED: frozenset({_S.APPLIED}),
    _S.APPLIED: frozenset(),
}


class Operation(Frozen):
    """One revision of an operation record; ``rev`` counts revisions from 1."""

    v: Literal[1] = OPERATION_RECORD_VERSION
    type: Literal["operation"] = "operation"
    operation_id: Identifier
    session_id: Identifier
    task_id: Identifier | None = None
    tool: str
    args: JsonValue = None
    replay: ReplayPolicy = ReplayPolicy.UNSAFE
    status: OperationStatus = OperationStatus.ACCEPTED
    rev: int = Field(default=1, ge=1)
    executor: str | None = None
    attempts: int = Field(default=0, ge=0)
    reason: str | None = None
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)


class OperationResult(Frozen):
    """The write-once outcome of an operation."""

    v: Literal[1] = OPERATION_RECORD_VERSION
    type: Literal["operation_result"] = "operation_result"
    operation_id: Identifier
    succeeded: bool
    output: JsonValue = None
    blob: BlobRef | None = None
    error: ErrorInfo | None = None
    finished_at: AwareDatetime = Field(default_factory=utcnow)
