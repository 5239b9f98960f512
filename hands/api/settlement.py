"""Settling an ``uncertain`` operation: an operator's decision, recorded by the store.

The store records it (``SessionStore.settle_operation``: the result, then the record
closed with who decided — the API token's name — and why) and refuses any operation
that is not ``uncertain``. Then the session hears of it: a notice in its log (the
control document's ``decisions``, which its event stream shows) and the result event
every other result sends, which the scheduler turns into a wake of the waiting task.
A retry of the same decision by the same token repeats the notice and the event.
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
    ToolFailed,
)
from contracts.tool import ResultEvent
from hands.api.context import ApiContext
from hands.api.views import SettleRequest
from session_store.submissions import SessionClient
from webapi.auth import Grant

#: The result ``path`` of a settled operation.
SETTLED: Final = "settled"


async def settle(
    context: ApiContext, operation: Operation, request: SettleRequest, grant: Grant
) -> Operation:
    """Record ``request`` as ``grant``'s decision on ``operation``; tell its session."""
    store = context.store
    if not _repeat(operation, request, grant):
        result = await _result(context, operation, request, grant)
        try:
            operation = await store.settle_operation(
                result, decided_by=grant.name, decision=request.reason
            )
        except InvalidTransition as error:  # it left `uncertain` meanwhile
            raise Refused(f"{error.message}; only an uncertain operation can be settled") from None
    await _tell(context, operation, request)
    return operation


def _repeat(operation: Operation, request: SettleRequest, grant: Grant) -> bool:
    """Whether this decision is already recorded (a retry); otherwise it must be new."""
    outcome = (
        OperationStatus.SUCCEEDED if request.outcome == "succeeded" else OperationStatus.FAILED
    )
    return (
        operation.status is outcome
        and operation.decided_by == grant.name
        and operation.decision == request.reason
    )


async def _result(
    context: ApiContext, operation: Operation, request: SettleRequest, grant: Grant
) -> OperationResult:
    succeeded = request.outcome == "succeeded"
    inline, blob = await context.store.put_output(request.output)
    error = None
    if not succeeded:
        error = ErrorInfo(
            code=ToolFailed.code,
            message=f"settled as failed by {grant.name}: {request.reason}",
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


async def _tell(context: ApiContext, operation: Operation, request: SettleRequest) -> None:
    decision: dict[str, JsonValue] = {
        "outcome": request.outcome,
        "decided_by": operation.decided_by,
        "decision": operation.decision,
        "decided_at": operation.updated_at.isoformat(),
    }
    handle = await context.store.session(operation.session_id)
    if handle.seq > 0:  # a session without a log has no task waiting
        await SessionClient(context.store).record_decision(
            operation.session_id, operation.operation_id, decision
        )
    await context.executor.publish(
        ResultEvent(
            operation_id=operation.operation_id,
            session_id=operation.session_id,
            succeeded=request.outcome == "succeeded",
        )
    )
