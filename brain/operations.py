"""Running an external action exactly once, across crashes (invariant 8, no blind replay).

The phase that runs an operation was committed as *running, attempt k* before the call
(intent before action). On attempt 1 nothing can have happened yet, so the tool runs.
On a later attempt, or when the call itself reports ``OutcomeUnknown``, an earlier try
may have happened, and the tool's declaration decides:

==========================  ===========================================================
tool                        recovery
==========================  ===========================================================
replay-safe                 run again with the same operation id (``replayed``)
unsafe, with a query        ask; found → use that result (``verified``); not found →
                            run it (``executed``)
unsafe, without a query     park the task as *uncertain* with the reason, waiting on the
                            operation's result; never re-run (``OperationParked``)
==========================  ===========================================================

Whatever the attempt, a result already recorded in the store for the operation id (by
an executor, a verifier, or an operator settling a parked operation) is used as it is
(``reused``): nothing runs again.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Literal

from pydantic import JsonValue

from contracts import (
    AlreadyExists,
    BrainhandsError,
    InvalidInput,
    Operation,
    OperationStatus,
    OutcomeUnknown,
    ReplayPolicy,
)
from contracts.model import Frozen

if TYPE_CHECKING:
    from brain.context import PhaseContext

Path = Literal["executed", "verified", "replayed", "reused"]


class Resolution(Frozen):
    """The result of an operation and how it was obtained."""

    operation_id: str
    path: Path
    output: JsonValue = None


class OperationParked(BrainhandsError):
    """The operation's outcome is unknown and cannot be checked; an operator must decide."""

    code = "operation_uncertain"

    def __init__(self, message: str, *, operation_id: str) -> None:
        super().__init__(message, operation_id=operation_id)
        self.operation_id = operation_id


async def resolve(
    ctx: PhaseContext, tool: str, args: dict[str, Any], operation_id: str
) -> Resolution:
    spec = ctx.services.tools.spec(tool)
    if spec is None:
        raise InvalidInput(f"unknown tool {tool!r}")
    settled = await ctx.services.store.get_operation_result(operation_id)
    if settled is not None:
        return Resolution(operation_id=operation_id, path="reused", output=settled.output)
    if ctx.attempt <= 1:
        try:
            return await _run(ctx, tool, args, operation_id, "executed")
        except OutcomeUnknown:
            pass  # the call may have happened: recover exactly as after a crash
    if spec.replay is ReplayPolicy.SAFE:
        return await _run(ctx, tool, args, operation_id, "replayed")
    if spec.queryable:
        ctx.checkpoint(f"call:before:query:{tool}")
        answer = await ctx.services.tools.query(tool, args, operation_id=operation_id)
        ctx.checkpoint(f"call:after:query:{tool}")
        if answer.found:
            return Resolution(operation_id=operation_id, path="verified", output=answer.output)
        return await _run(ctx, tool, args, operation_id, "executed")
    reason = (
        f"operation {operation_id} ({tool}) may have run before attempt {ctx.attempt}; "
        f"{tool} is not replay-safe and has no query, so it is not re-run"
    )
    await _record_uncertain(ctx, tool, args, operation_id, reason)
    raise OperationParked(reason, operation_id=operation_id)


async def _run(
    ctx: PhaseContext, tool: str, args: dict[str, Any], operation_id: str, path: Path
) -> Resolution:
    ctx.checkpoint(f"call:before:{tool}")
    output = await ctx.services.tools.run(tool, args, operation_id=operation_id)
    ctx.checkpoint(f"call:after:{tool}")
    return Resolution(operation_id=operation_id, path=path, output=output)


async def _record_uncertain(
    ctx: PhaseContext, tool: str, args: dict[str, Any], operation_id: str, reason: str
) -> None:
    """Make the parked operation visible where operators look for operations."""
    operation = Operation(
        operation_id=operation_id,
        session_id=ctx.session_id,
        task_id=ctx.task.id,
        tool=tool,
        args=args,
        replay=ReplayPolicy.UNSAFE,
        status=OperationStatus.UNCERTAIN,
        reason=reason,
    )
    with contextlib.suppress(AlreadyExists):  # parked before: the record is there
        await ctx.services.store.create_operation(operation)
