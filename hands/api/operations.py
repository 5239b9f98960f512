"""``/v1/operations``: an operation's record and result, lists, cancel, verify, settle.

The store is the truth: every answer is read from it after the action. A cancel acts
here (this host's container, or an operation that never started) and, with a bus, is
broadcast on ``tools.cancel`` so the Hands whose host runs the operation acts too.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Path, Query, Response

from bus import CANCEL_SUBJECT
from contracts import (
    Identifier,
    NotFound,
    Operation,
    OperationStatus,
    SettleRequest,
    StoreUnavailable,
)
from contracts.errors import ErrorBody
from contracts.tool import Cancellation
from hands.api.context import ApiContext
from hands.api.settlement import settle
from hands.api.views import (
    CancelRequest,
    OperationList,
    OperationSummary,
    OperationView,
    Verification,
)
from session_store import SessionStore
from webapi.auth import Access, Grant
from webapi.scopes import check_session, needs, visible

log = logging.getLogger(__name__)

#: Without ``session``, at most this many active sessions are scanned.
MAX_SCANNED_SESSIONS: Final = 100
DEFAULT_LIMIT: Final = 500
MAX_LIMIT: Final = 5000

OperationId = Annotated[Identifier, Path(description="The operation's stable id.")]
SessionParam = Annotated[
    Identifier | None,
    Query(
        description="The session whose operations to list. Without it, up to "
        f"{MAX_SCANNED_SESSIONS} active sessions are scanned (finished ones are not).",
    ),
]
StatusParam = Annotated[OperationStatus | None, Query(description="Only this status.")]
LimitParam = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many.")]

Reader = Annotated[Grant, needs(Access.READ)]
Operator = Annotated[Grant, needs(Access.OPERATE)]

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such operation"}
}


def operations_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/operations", tags=["operations"])

    @router.get("/{operation_id}", responses=_NOT_FOUND)
    async def get_operation(operation_id: OperationId, grant: Reader) -> OperationView:
        """The operation's record and, once written, its result."""
        await _operation(context.store, operation_id, grant)
        return await view_of(context.store, operation_id)

    @router.get("")
    async def list_operations(
        grant: Reader,
        session: SessionParam = None,
        status: StatusParam = None,
        limit: LimitParam = DEFAULT_LIMIT,
    ) -> OperationList:
        """Operations of a session (or of the active ones the token covers), oldest first."""
        if session is not None:
            check_session(grant, session)
        return await _list(context.store, session, status, limit, grant)

    @router.post(
        "/{operation_id}/cancel",
        responses={
            **_NOT_FOUND,
            202: {"model": OperationView, "description": "Cancelling; no result yet"},
            409: {"model": ErrorBody, "description": "Its container could not be removed yet"},
        },
    )
    async def cancel_operation(
        operation_id: OperationId,
        response: Response,
        grant: Operator,
        body: Annotated[CancelRequest | None, Body()] = None,
    ) -> OperationView:
        """Cancel an operation that has no result yet; one that has keeps it. 200 when
        it is settled, 202 while the Hands running it elsewhere is still to act."""
        reason = (body or CancelRequest()).reason
        view = await _cancel(context, operation_id, reason, grant)
        response.status_code = 200 if view.result is not None else 202
        return view

    @router.post(
        "/{operation_id}/verify",
        responses={
            **_NOT_FOUND,
            422: {"model": ErrorBody, "description": "The tool has no query entry point"},
        },
    )
    async def verify_operation(operation_id: OperationId, grant: Operator) -> Verification:
        """Ask the tool's query entry point whether the operation happened; a found
        outcome becomes its result."""
        await _operation(context.store, operation_id, grant)
        found = await context.executor.verify(operation_id)
        view = await view_of(context.store, operation_id)
        return Verification(found=found is not None, operation=view)

    @router.post(
        "/{operation_id}/settle",
        responses={
            **_NOT_FOUND,
            409: {"model": ErrorBody, "description": "The operation is not uncertain"},
        },
    )
    async def settle_operation(
        operation_id: OperationId, body: SettleRequest, grant: Operator
    ) -> OperationView:
        """Record an operator's decision on an ``uncertain`` operation (who: the token's
        name; why: ``reason``) and wake its task; 409 for any other status."""
        operation = await _operation(context.store, operation_id, grant)
        await settle(context, operation, body, grant)
        return await view_of(context.store, operation_id)

    return router


async def view_of(store: SessionStore, operation_id: str) -> OperationView:
    operation = await _operation(store, operation_id)
    result = await store.get_operation_result(operation_id)
    return OperationView.with_result(operation, result)


async def _operation(
    store: SessionStore, operation_id: str, grant: Grant | None = None
) -> Operation:
    """The operation; 404 when it is not on record or (``grant``) not the token's."""
    operation = await store.get_operation(operation_id)
    if grant is not None:
        return visible(grant, operation, operation_id)
    if operation is None:
        raise NotFound(f"operation {operation_id!r} is not on record", operation_id=operation_id)
    return operation


async def _cancel(
    context: ApiContext, operation_id: str, reason: str, grant: Grant
) -> OperationView:
    operation = await _operation(context.store, operation_id, grant)
    if await context.store.get_operation_result(operation_id) is None:
        settled = await context.executor.cancel(operation_id, reason) is not None
        await _broadcast(context, operation, reason, settled=settled)
    return await view_of(context.store, operation_id)


async def _broadcast(
    context: ApiContext, operation: Operation, reason: str, *, settled: bool
) -> None:
    """Tell every Hands (the one whose host runs it acts); harmless where it is settled."""
    if context.bus is None:
        return
    cancellation = Cancellation(
        operation_id=operation.operation_id, session_id=operation.session_id, reason=reason
    )
    try:
        await context.bus.broadcast(CANCEL_SUBJECT, cancellation)
    except StoreUnavailable as error:
        if not settled:
            raise  # nobody else heard it: the caller must retry
        log.warning("cancel %s: settled here; broadcast failed: %s", operation.operation_id, error)


async def _list(
    store: SessionStore,
    session: str | None,
    status: OperationStatus | None,
    limit: int,
    grant: Grant,
) -> OperationList:
    if session is not None:
        sessions, complete = [session], True
    else:
        scanned, complete = await store.some_active_sessions(MAX_SCANNED_SESSIONS)
        sessions = [session_id for session_id in scanned if grant.covers(session_id)]
    found: list[Operation] = []
    for session_id in sessions:
        found.extend(await store.list_operations(session_id))
    matching = sorted(
        (op for op in found if status is None or op.status is status),
        key=lambda op: (op.created_at, op.operation_id),
    )
    return OperationList(
        operations=[OperationSummary.of(op) for op in matching[:limit]],
        truncated=len(matching) > limit or not complete,
        sessions_scanned=len(sessions),
    )
