"""The Hands API's wire models: what its routes accept and answer (pure data).

Shared by the server (``hands.api``) and its client (``bh.hands_client``). Requests
forbid unknown fields, so a misspelt field is an error that names it, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal, TypeVar

from pydantic import Field, JsonValue, ValidationError

from contracts import (
    BlobRef,
    ErrorInfo,
    InvalidInput,
    Operation,
    OperationResult,
    OperationStatus,
    ReplayPolicy,
)
from contracts.model import Frozen
from contracts.tool import ConfigName, Destination, NetworkPolicy, ToolDefinition, ToolRevision

#: The reason recorded when a cancel request gives none.
DEFAULT_CANCEL_REASON = "cancelled via the Hands API"


class Health(Frozen):
    status: Literal["ok"] = "ok"


class ResultView(Frozen):
    """An operation's write-once result; a large ``output`` is a ``blob`` reference."""

    succeeded: bool
    termination: str | None = None
    exit_code: int | None = None
    output: JsonValue = None
    blob: BlobRef | None = None
    error: ErrorInfo | None = None
    log_tail: str = ""
    truncated: bool = False
    path: str | None = None
    executor: str | None = None
    container: str | None = None
    started_at: datetime | None = None
    finished_at: datetime

    @classmethod
    def of(cls, result: OperationResult) -> ResultView:
        return cls(
            succeeded=result.succeeded,
            termination=result.termination,
            exit_code=result.exit_code,
            output=result.output,
            blob=result.blob,
            error=result.error,
            log_tail=result.log_tail,
            truncated=result.truncated,
            path=result.path,
            executor=result.executor,
            container=result.container,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )


class OperationSummary(Frozen):
    """An operation's record (its latest revision), without its result."""

    operation_id: str
    session_id: str
    task_id: str | None = None
    tool: str
    tool_version: int | None = None
    replay: ReplayPolicy
    status: OperationStatus
    rev: int
    attempts: int
    executor: str | None = None
    deadline: datetime | None = None
    reason: str | None = None
    decided_by: str | None = None
    decision: str | None = None
    #: a recorded request to stop it (its reason, who asked)
    cancel: str | None = None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def fields_of(cls, operation: Operation) -> dict[str, object]:
        return {name: getattr(operation, name) for name in OperationSummary.model_fields}

    @classmethod
    def of(cls, operation: Operation) -> OperationSummary:
        return cls.model_validate(cls.fields_of(operation))


class OperationView(OperationSummary):
    """An operation with its result, once there is one."""

    result: ResultView | None = None

    @classmethod
    def with_result(cls, operation: Operation, result: OperationResult | None) -> OperationView:
        return cls.model_validate(
            {
                **cls.fields_of(operation),
                "result": None if result is None else ResultView.of(result),
            }
        )


class OperationList(Frozen):
    """Operations, oldest first. ``truncated``: more matched than ``limit``, or the scan
    of active sessions stopped at its bound (``sessions_scanned`` sessions looked at)."""

    operations: list[OperationSummary]
    truncated: bool = False
    sessions_scanned: int = 0


class CancelRequest(Frozen):
    reason: str = Field(default=DEFAULT_CANCEL_REASON, min_length=1, max_length=1000)


class Verification(Frozen):
    """What the tool's query entry point said: ``found`` means the operation happened,
    and its outcome is now the operation's result."""

    found: bool
    operation: OperationView


class RegisterRequest(Frozen):
    """Register a tool image; ``allow`` grants egress destinations (``host:port``),
    ``config`` non-secret settings passed to its containers as environment."""

    image: str = Field(min_length=1, max_length=512)
    allow: list[Destination] = Field(default_factory=list, max_length=64)
    config: dict[ConfigName, str] = Field(default_factory=dict, max_length=64)
    registered_by: str = Field(default="hands-api", max_length=200)


class ToolList(Frozen):
    tools: list[ToolDefinition]


class GrantRequest(Frozen):
    """Change what a registered tool may reach: ``allow`` replaces its destinations
    (``[]``: no network). Recorded as a revision with who (``by``, and the token) and
    why (``reason``); ``revision``: refuse (409) unless this is still the current one."""

    version: int = Field(ge=1)
    allow: list[Destination] = Field(max_length=64)
    reason: str = Field(min_length=1, max_length=1000)
    by: str | None = Field(default=None, min_length=1, max_length=200)
    revision: int | None = Field(default=None, ge=1)

    @property
    def network(self) -> NetworkPolicy:
        return NetworkPolicy(allow=tuple(self.allow))


class ToolHistory(Frozen):
    """Every revision of ``tool`` (``name@version``), oldest first; the last is current."""

    tool: str
    revisions: list[ToolRevision]


_R = TypeVar("_R", bound=Frozen)


def checked(model: type[_R], fields: Mapping[str, object]) -> _R:
    """``model`` from ``fields``, as a client or the CLI builds a request: the first
    problem is an ``InvalidInput`` naming the field and the value found there."""
    try:
        return model.model_validate(dict(fields))
    except ValidationError as error:
        first = error.errors()[0]
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]
        ).lstrip(".")
        found = "" if first["type"] == "missing" else f" {first['input']!r}"
        raise InvalidInput(
            f"{where or '(request)'}{found} is invalid: {first['msg']}", field=where
        ) from None
