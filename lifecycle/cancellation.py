"""Recording a cancellation on an operation, before anyone is told.

Exactly one of {cancel, claim} wins each revision of the record; the loser re-reads and
acts on what won:

=====================================  ================================================
the record as read                     what the cancellation writes
=====================================  ================================================
none (no Hands recorded it yet)        a ``cancelled`` record and result: it never ran,
                                       and a later dispatch finds it settled
``accepted`` (recorded, not started)   ``cancelled``, and its result
``running`` (claimed)                  ``cancel`` on the record: the runner does not
                                       start it, or stops it; its result then says what
                                       happened (``cancelled`` only if it never started)
``uncertain``                          nothing: it is never re-run without an operator,
                                       and whether it happened is still unknown (an
                                       operator settles it: ``bh ops settle``)
final                                  nothing: the result stands
=====================================  ================================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from contracts import (
    AlreadyExists,
    ConflictError,
    ErrorInfo,
    NotFound,
    Operation,
    OperationResult,
    OperationStatus,
)
from contracts.tool import Termination
from session_store import SessionStore

#: a test hook between reading the record and writing its revision
Pause = Callable[[str], Awaitable[None]]


async def _no_pause(_: str) -> None:
    return None


class CancelTarget:
    """What the canceller knows of the call, to record it if no Hands did yet."""

    def __init__(self, *, session_id: str, task_id: str | None = None, tool: str | None = None):
        self.session_id = session_id
        self.task_id = task_id
        self.tool = tool


async def record_cancel(
    store: SessionStore,
    operation_id: str,
    reason: str,
    *,
    by: str,
    target: CancelTarget | None = None,
    pause: Pause = _no_pause,
) -> Operation:
    """Record the cancellation of ``operation_id`` (see the table); the record as it
    stands afterwards. ``NotFound`` when there is no record and no ``target``."""
    while True:
        record = await store.get_operation(operation_id)
        await pause("cancel:read")
        try:
            if record is None:
                if target is None:
                    raise NotFound(
                        f"operation {operation_id!r} is not on record",
                        operation_id=operation_id,
                    )
                created = await store.create_operation(
                    Operation(
                        operation_id=operation_id,
                        session_id=target.session_id,
                        task_id=target.task_id,
                        tool=target.tool or "unknown",
                        status=OperationStatus.CANCELLED,
                        reason=reason,
                        cancel=f"{reason} (by {by})",
                    )
                )
                await write_cancelled(store, created, reason)
                return created
            if record.status is not OperationStatus.ACCEPTED and (
                record.status is not OperationStatus.RUNNING or record.cancel
            ):
                return record  # final, uncertain, or its cancellation recorded already
            asked = f"{reason} (by {by})"
            if record.status is OperationStatus.RUNNING:
                return await store.transition_operation(
                    record, OperationStatus.RUNNING, cancel=asked
                )
            cancelled = await store.transition_operation(
                record, OperationStatus.CANCELLED, cancel=asked, reason=reason
            )
            await write_cancelled(store, cancelled, reason)
            return cancelled
        except (ConflictError, AlreadyExists):
            continue  # the claim (or another canceller) won this revision: look again


def cancelled_result(record: Operation, reason: str | None) -> OperationResult:
    """The result of an operation stopped before it could start."""
    return OperationResult(
        operation_id=record.operation_id,
        session_id=record.session_id,
        succeeded=False,
        error=ErrorInfo(code="cancelled", message=reason or "cancelled"),
        termination=Termination.CANCELLED.value,
        path="cancelled",
    )


def never_ran(result: OperationResult) -> bool:
    """Whether ``result`` says its operation was stopped before it could start (the
    only result a cancellation writes itself): nothing happened."""
    return result.path == "cancelled"


async def write_cancelled(store: SessionStore, record: Operation, reason: str | None) -> None:
    """Write the cancelled result once (an earlier one stands)."""
    try:
        await store.put_operation_result(cancelled_result(record, reason))
    except AlreadyExists:
        return
