"""Operations: external actions with a stable identity, as their executors record them.

An operation belongs to one session and one task, with its tool and frozen arguments;
every attempt to run it is recorded before it starts (``attempts``, ``executor``,
``deadline``), and its outcome is written once (``OperationResult``). Whether the result
entered the session is a fact of the session's log (the commit that applied it), not of
this record.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final, Literal

from pydantic import Field, JsonValue

from contracts.blob import BlobRef
from contracts.errors import ErrorInfo
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow
from contracts.workspace import Artifact, WorkspaceVersion

OPERATION_RECORD_VERSION: Final = 1
#: Outputs larger than this are stored as a blob referenced by the result record.
INLINE_RESULT_BYTES: Final = 16 * 1024


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

    @property
    def is_final(self) -> bool:
        return not OPERATION_TRANSITIONS[self]


_S = OperationStatus

# The operation state machine as data: status -> statuses it may move to.
# RUNNING -> RUNNING starts another attempt (the earlier one's outcome was unknown and
# its deadline passed). Leaving UNCERTAIN needs a recorded decision (who, why).
OPERATION_TRANSITIONS: Mapping[OperationStatus, frozenset[OperationStatus]] = {
    _S.ACCEPTED: frozenset({_S.RUNNING, _S.CANCELLED, _S.UNCERTAIN}),
    _S.RUNNING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.UNCERTAIN}),
    _S.UNCERTAIN: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


class Operation(Frozen):
    """One revision of an operation record; ``rev`` counts revisions from 1.

    ``attempts`` counts starts; the current one was made by ``executor`` (running in
    ``process``, see ``runtime.incarnation``) and is abandoned by it at ``deadline``: until
    then it may still be in flight, and nobody else runs or verifies the operation.
    ``decided_by`` and ``decision`` record who moved it out of ``uncertain``, and why.
    ``cancel`` records that someone asked it to stop, before anyone is told.
    """

    v: Literal[1] = OPERATION_RECORD_VERSION
    type: Literal["operation"] = "operation"
    operation_id: Identifier
    session_id: Identifier
    task_id: Identifier | None = None
    tool: str
    tool_version: int | None = None
    args: JsonValue = None
    replay: ReplayPolicy = ReplayPolicy.UNSAFE
    status: OperationStatus = OperationStatus.ACCEPTED
    rev: int = Field(default=1, ge=1)
    executor: str | None = None
    process: str | None = None
    attempts: int = Field(default=0, ge=0)
    deadline: AwareDatetime | None = None
    #: the deadline of the last attempt that ran the action: a claim that only collects
    #: or queries moves ``deadline``, not this; until it has passed (plus the takeover
    #: margin) that attempt's request may still land, whatever a query says
    attempt_deadline: AwareDatetime | None = None
    reason: str | None = None
    decided_by: str | None = None
    decision: str | None = None
    #: a recorded request to stop (its reason, who asked): the run is not started, or is
    #: stopped; the result then says what happened (``lifecycle.cancellation``)
    cancel: str | None = None
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)

    def differences(
        self, session_id: str, task_id: str | None, tool: str, args: JsonValue
    ) -> list[str]:
        """What of a call differs from this record's (a result answers only the same)."""
        return [
            what
            for what, same in (
                ("session", self.session_id == session_id),
                ("task", self.task_id == task_id),
                ("tool", self.tool == tool),
                ("arguments", self.args == args),
            )
            if not same
        ]


class OutputPreview(Frozen):
    """What a running operation has written to its log so far, as its executor last
    saved it (at most once a second): the last ``text`` of it and how many bytes in
    all. A preview may be lost or late and is never a result; the result is written
    once, when the run ends."""

    v: Literal[1] = OPERATION_RECORD_VERSION
    type: Literal["output_preview"] = "output_preview"
    operation_id: Identifier
    session_id: Identifier
    #: the end of the run's stderr (its log; stdout carries only the result document)
    text: str = ""
    #: bytes written in all (``text`` keeps the last ones)
    bytes: int = Field(default=0, ge=0)
    running: bool = True
    at: AwareDatetime = Field(default_factory=utcnow)


class OperationResult(Frozen):
    """The write-once outcome of an operation, in the session the operation belongs to.

    Sandboxed runs also say how the run ended (``termination``, a ``Termination`` value),
    its ``exit_code``, a capped tail of its logs and whether output was cut
    (``truncated``), which executor and container produced it, and how (``path``:
    ``executed``, ``replayed`` or ``verified``). A run that mounted its session's
    workspace read-write and ran to its end records the ``version`` its tree became
    (whatever its exit code); a run of either mode, the ``artifacts`` it published.
    """

    v: Literal[1] = OPERATION_RECORD_VERSION
    type: Literal["operation_result"] = "operation_result"
    operation_id: Identifier
    session_id: Identifier
    succeeded: bool
    output: JsonValue = None
    blob: BlobRef | None = None
    error: ErrorInfo | None = None
    termination: str | None = None
    exit_code: int | None = None
    log_tail: str = ""
    truncated: bool = False
    path: str | None = None
    executor: str | None = None
    container: str | None = None
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime = Field(default_factory=utcnow)
    #: the workspace version the run produced from its mount's base (``rw`` runs that
    #: exited); None: it changed no workspace
    version: WorkspaceVersion | None = None
    #: the named outputs it published (files it wrote under ``$BH_ARTIFACTS``)
    artifacts: tuple[Artifact, ...] = ()


class SettleRequest(Frozen):
    """An operator's decision on an ``uncertain`` operation: what happened (found out
    elsewhere, e.g. with the service it called) and why they say so."""

    outcome: Literal["succeeded", "failed"]
    #: the operation's output (what the tool would have returned), for ``succeeded``
    output: JsonValue = None
    reason: str = Field(min_length=1, max_length=1000)
