"""Settling an ``uncertain`` operation through the Hands API (``bh ops settle``): the
decision recorded by ``lifecycle.settlement`` under the token's name, then the result
event every other result sends, which the scheduler turns into a wake of the waiting
task. A retry of the same decision by the same token repeats the notice and the event.
"""

from __future__ import annotations

from contracts import Operation, SettleRequest
from contracts.tool import ResultEvent
from hands.api.context import ApiContext
from lifecycle import settlement
from webapi.auth import Grant

SETTLED = settlement.SETTLED


async def settle(
    context: ApiContext, operation: Operation, request: SettleRequest, grant: Grant
) -> Operation:
    """Record ``request`` as ``grant``'s decision on ``operation``; tell its session."""
    operation = await settlement.settle(context.store, operation, request, decided_by=grant.name)
    await context.executor.publish(
        ResultEvent(
            operation_id=operation.operation_id,
            session_id=operation.session_id,
            succeeded=request.outcome == "succeeded",
        )
    )
    return operation
