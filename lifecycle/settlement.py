"""Settling an ``uncertain`` operation: an operator's decision, recorded by the store.

An operation whose outcome is unknown and that no executor will re-run waits for a
person who found out elsewhere what happened (the provider's dashboard, the mailbox).
The store records the decision (``SessionStore.settle_operation``: the result — path
``settled`` —, then the record closed with who decided and why) and refuses any
operation that is not ``uncertain``. Then the session's log gets a notice (the control
document's ``decisions``, which its event stream shows). Repeating the same decision by
the same person is harmless: the notice is said again, nothing else changes.

Both APIs an operator may use settle through here: the Hands API (``bh ops settle``),
which then publishes the result event every result sends, and the Session API (its
console), which then wakes the session itself. Either way the waiting task resumes and
reuses the result; the store decides, the wake or the event only delivers.
"""

from __future__ import annotations

from typing import Final

from pydantic import JsonValue

from contracts import (
    ErrorInfo,
    InvalidTransition,
    Operation,
    OperationResult,
    OperationStatus,
    Refused,
    SettleRequest,
    ToolFailed,
)
from session_store import SessionStore
from session_store.submissions import SessionClient

#: The result ``path`` of a settled operation.
SETTLED: Final = "settled"


async def settle(
    store: SessionStore, operation: Operation, request: SettleRequest, *, decided_by: str
) -> Operation:
    """Record ``request`` as ``decided_by``'s decision on ``operation`` and say so in its
    session's log; the operation as settled."""
    if not _repeat(operation, request, decided_by):
        result = await _result(store, operation, request, decided_by)
        try:
            operation = await store.settle_operation(
                result, decided_by=decided_by, decision=request.reason
            )
        except InvalidTransition as error:  # it left `uncertain` meanwhile
            raise Refused(f"{error.message}; only an uncertain operation can be settled") from None
    await _notice(store, operation, request)
    return operation


def _repeat(operation: Operation, request: SettleRequest, decided_by: str) -> bool:
    """Whether this decision is already recorded (a retry); otherwise it must be new."""
    outcome = (
        OperationStatus.SUCCEEDED if request.outcome == "succeeded" else OperationStatus.FAILED
    )
    return (
        operation.status is outcome
        and operation.decided_by == decided_by
        and operation.decision == request.reason
    )


async def _result(
    store: SessionStore, operation: Operation, request: SettleRequest, decided_by: str
) -> OperationResult:
    succeeded = request.outcome == "succeeded"
    inline, blob = await store.put_output(request.output)
    error = None
    if not succeeded:
        error = ErrorInfo(
            code=ToolFailed.code,
            message=f"settled as failed by {decided_by}: {request.reason}",
        )
    return OperationResult(
        operation_id=operation.operation_id,
        session_id=operation.session_id,
        succeeded=succeeded,
        output=inline,
        blob=blob,
        error=error,
        path=SETTLED,
    )


async def _notice(store: SessionStore, operation: Operation, request: SettleRequest) -> None:
    decision: dict[str, JsonValue] = {
        "outcome": request.outcome,
        "decided_by": operation.decided_by,
        "decision": operation.decision,
        "decided_at": operation.updated_at.isoformat(),
    }
    handle = await store.session(operation.session_id)
    if handle.seq > 0:  # a session without a log has no task waiting
        await SessionClient(store).record_decision(
            operation.session_id, operation.operation_id, decision
        )
