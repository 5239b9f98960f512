"""``/v1/sessions``: submit, answer a question, cancel, settle an uncertain operation,
look at a session, list them, follow one's events.

Writes go through ``session_store.submissions.SessionClient`` (the ingress rules: a
request id is accepted once, bad input is refused naming the field, a cancel is a
request in the control document). A Brain is woken only after the store confirmed the
write (persist, then adopt); a wake that fails is logged, and the scheduler's
reconciler finds the work from the store.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter, ValidationError

from contracts import (
    AlreadyExists,
    Identifier,
    InvalidInput,
    NotFound,
    QuestionExpired,
    SettleRequest,
    Submission,
)
from contracts.errors import ErrorBody
from lifecycle import settlement
from session_api.context import ApiContext
from session_api.describe import control_body, operation_view, session_view, submission_view
from session_api.listing import Listing
from session_api.stream import HeldStream, SessionStream
from session_api.views import (
    AnswerRequest,
    BudgetRequest,
    CancelAccepted,
    CancelRequest,
    ForkRequest,
    ForkView,
    InputPolicyRequest,
    OperationView,
    RetentionRequest,
    SessionList,
    SessionStatus,
    SessionView,
    SubmissionView,
    SubmitRequest,
)
from session_store import SessionHandle
from session_store.intake import check_ids, read_work
from webapi.auth import Access, Grant
from webapi.scopes import check_session, needs

DEFAULT_ENTRIES: Final = 20
MAX_ENTRIES: Final = 500
_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)

SessionId = Annotated[Identifier, Path(description="The session's id.")]
EntriesParam = Annotated[
    int, Query(ge=0, le=MAX_ENTRIES, description="How many of the last entries to include.")
]

LimitParam = Annotated[
    int | None, Query(ge=1, description="At most this many sessions (default: the bound, 200).")
]

Reader = Annotated[Grant, needs(Access.READ)]
Operator = Annotated[Grant, needs(Access.OPERATE)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such session, submission or task"},
    503: {"model": ErrorBody, "description": "The store is not reachable: retry"},
}
_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
        "description": "Server-Sent Events: `view`, then `commit` per commit (ids are "
        "seqs), `: keepalive` comments, `error` before an abnormal end",
    },
    429: {
        "model": ErrorBody,
        "description": "Too many event streams open (the token's or this server's cap): "
        "retry after `Retry-After` seconds",
    },
    **_ERRORS,
}


def sessions_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

    @router.post(
        "/{session_id}/submissions",
        status_code=201,
        responses={
            200: {"model": SubmissionView, "description": "Already submitted: the original"},
            **_ERRORS,
        },
    )
    async def submit(
        session_id: SessionId, body: SubmitRequest, response: Response, grant: Operator
    ) -> SubmissionView:
        """Accept input once per ``request_id``: 201 with the new submission, or 200 with
        the original (and no new work) when the request id was submitted before."""
        check_session(grant, session_id)
        submission, created = await _submit(context, session_id, body)
        if not created:
            response.status_code = 200
        return submission_view(submission)

    @router.post(
        "/{session_id}/inputs",
        status_code=201,
        responses={
            200: {"model": SubmissionView, "description": "Already answered by this request"},
            409: {
                "model": ErrorBody,
                "description": "already_answered, question_closed or question_expired",
            },
            422: {"model": ErrorBody, "description": "The value does not fit the question"},
            **_ERRORS,
        },
    )
    async def answer(
        session_id: SessionId, body: AnswerRequest, response: Response, grant: Operator
    ) -> SubmissionView:
        """Answer an open question of a waiting task, once per ``request_id``, as the
        token's name (``by`` is kept beside it, unverified): 201 with the accepted answer
        (a submission; ``answered`` once applied), 200 with the original for a repeated
        request id; 409 when another answer was accepted first (``already_answered``,
        naming it), the question is closed, or its deadline passed (``question_expired``);
        404 no such open question; 422 the value does not fit it."""
        check_session(grant, session_id)
        submission, created = await answer_question(context, session_id, body, grant.name)
        if not created:
            response.status_code = 200
        return submission_view(submission)

    @router.put("/{session_id}/input-policy", responses=_ERRORS)
    async def set_input_policy(
        session_id: SessionId, body: InputPolicyRequest, grant: Operator
    ) -> InputPolicyRequest:
        """Set the session's default for a message that arrives while its conversation's
        agent still runs: ``enqueue`` (the default), ``interrupt`` or ``reject``."""
        check_session(grant, session_id)
        await context.client.set_input_policy(session_id, body.policy)
        return body

    @router.put("/{session_id}/budget", responses=_ERRORS)
    async def set_budget(
        session_id: SessionId, body: BudgetRequest, grant: Operator
    ) -> BudgetRequest:
        """Set the session's model budget (null: none): when its calls have used it up,
        an agent's next model call waits for approval to go on, or fails (``on_exceed``)."""
        check_session(grant, session_id)
        await context.client.set_budget(session_id, body.budget)
        return body

    @router.put("/{session_id}/retention", responses=_ERRORS)
    async def set_retention(
        session_id: SessionId, body: RetentionRequest, grant: Operator
    ) -> RetentionRequest:
        """Set how many of its latest workspace versions the session keeps from
        collection (null: back to the default, 10). Its head, the versions its open
        calls mount or produced and what its forks keep are kept whatever this says."""
        check_session(grant, session_id)
        await context.client.set_retention(session_id, body.retention)
        return body

    @router.get("")
    async def list_sessions(
        grant: Reader,
        limit: LimitParam = None,
        every: Annotated[
            bool,
            Query(
                alias="all",
                description="Every session (finished ones too); without: the sessions "
                "that have work left. Both are paged in id order with `after`.",
            ),
        ] = False,
        status: Annotated[
            SessionStatus | None, Query(description="Only sessions in this state.")
        ] = None,
        prefix: Annotated[
            str, Query(max_length=200, description="Only sessions whose id begins so.")
        ] = "",
        kind: Annotated[
            str | None,
            Query(max_length=200, description="Only sessions with a root task of this kind."),
        ] = None,
        after: Annotated[
            str | None,
            Query(max_length=200, description="The `next_after` of the last page."),
        ] = None,
    ) -> SessionList:
        """Sessions the token covers: those that have work left or, with ``all``, every
        session; pages of ids in id order (each page of active ones shown newest first),
        ``after`` going on from the last; ``status``, ``kind`` and ``prefix`` narrow it."""
        bound = context.list_limit
        if limit is not None and limit > bound:
            raise InvalidInput(f"limit {limit} is above this API's bound {bound}", field="limit")
        listing = Listing(
            context.store, grant, limit=limit or bound, status=status, prefix=prefix, kind=kind
        )
        return await (listing.every(after) if every else listing.active(after))

    @router.get("/{session_id}", responses=_ERRORS)
    async def get_session(
        session_id: SessionId,
        grant: Reader,
        entries: EntriesParam = DEFAULT_ENTRIES,
        at: Annotated[
            int | None,
            Query(ge=1, description="The session as it was right after this commit."),
        ] = None,
    ) -> SessionView:
        """The session as of its latest commit (or as it was after commit ``at``):
        submissions, tasks, operations, recent entries, blocked tasks; 404 for a session
        without commits, or without commit ``at``."""
        check_session(grant, session_id)
        if at is not None:
            past = await context.store.session_at(session_id, at)
            return await session_view(context.store, past, entries=entries)
        handle = await context.store.session(session_id)
        if handle.seq == 0:
            raise NotFound(f"session {session_id!r} has no commits", session_id=session_id)
        return await session_view(context.store, handle, entries=entries)

    @router.post(
        "/{session_id}/cancel",
        status_code=202,
        responses={
            200: {"model": CancelAccepted, "description": "Already final: nothing to cancel"},
            **_ERRORS,
        },
    )
    async def cancel(
        session_id: SessionId, body: CancelRequest, response: Response, grant: Operator
    ) -> CancelAccepted:
        """Request the cancellation of a submission or a task: 202 while the lease holder
        is to act on it, 200 when it is already final (nothing recorded)."""
        check_session(grant, session_id)
        accepted, final = await cancel_work(context, session_id, body)
        if final:
            response.status_code = 200
        return accepted

    @router.post(
        "/{session_id}/operations/{operation_id}/settle",
        responses={
            409: {"model": ErrorBody, "description": "The operation is not uncertain"},
            **_ERRORS,
        },
    )
    async def settle(
        session_id: SessionId, operation_id: Identifier, body: SettleRequest, grant: Operator
    ) -> OperationView:
        """Record an operator's decision on one of the session's ``uncertain`` operations
        (who: the token's name; why: ``reason``) and wake the session, whose waiting task
        reuses it as the result; 409 for any other status, 200 for a repeat."""
        check_session(grant, session_id)
        return await settle_operation(context, session_id, operation_id, body, grant.name)

    @router.post(
        "/{session_id}/fork",
        status_code=201,
        responses={
            200: {"model": ForkView, "description": "Forked before, the same way: that fork"},
            409: {"model": ErrorBody, "description": "`into` is another session already"},
            **_ERRORS,
        },
    )
    async def fork(
        session_id: SessionId, body: ForkRequest, response: Response, grant: Operator
    ) -> ForkView:
        """Start session ``into`` as this one was right after commit ``at``, referring to
        its history (nothing copied; this session is only read): 201 with the fork, 200
        when ``into`` is already this very fork (a retry), 409 when ``into`` exists
        otherwise, 404 when ``at`` is past this session's head. External actions that
        already happened are not undone."""
        check_session(grant, session_id)
        check_session(grant, body.into)
        handle, created = await fork_session(context, session_id, body)
        if not created:
            response.status_code = 200
        if handle.state.is_active:
            await context.wake(body.into, "fork")
        return ForkView(
            session_id=body.into,
            origin=session_id,
            at=body.at,
            seq=handle.seq,
            active=handle.state.is_active,
        )

    @router.get("/{session_id}/events", response_class=StreamingResponse, responses=_STREAM)
    async def events(
        session_id: SessionId,
        request: Request,
        grant: Reader,
        entries: EntriesParam = DEFAULT_ENTRIES,
        last_event_id: Annotated[
            int | None,
            Header(ge=0, description="Resume after this seq (the last event id received)."),
        ] = None,
    ) -> StreamingResponse:
        """Follow the session: a ``view`` event, then a ``commit`` event per commit.
        With ``Last-Event-ID``, only the commits after it (see docs/session-api.md)."""
        check_session(grant, session_id)
        slot = context.slots.reserve(grant.name)  # charged first: 429 over a cap
        try:
            stream = SessionStream(
                context.store,
                session_id,
                settings=context.streams,
                entries=entries,
                gone=request.is_disconnected,
                stopping=context.stopping,
            )
            await stream.open(last_event_id)
        except BaseException:
            slot.release()
            raise
        return HeldStream(
            slot,
            stream.events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return router


async def _submit(
    context: ApiContext, session_id: str, body: SubmitRequest
) -> tuple[Submission, bool]:
    """The submission, and whether this request created it."""
    check_ids(body.request_id, body.conversation_id)
    read_work(body.input)
    client = context.client
    existing = await client.get(session_id, body.request_id)
    submission = await client.submit(
        session_id, body.request_id, body.input, conversation_id=body.conversation_id
    )
    # A concurrent request with the same id may have won the race since the check.
    created = existing is None and (submission.input, submission.conversation_id) == (
        body.input,
        body.conversation_id,
    )
    if created or not submission.status.is_final:
        # A repeat wakes too: the client may be retrying after a crash that lost the wake.
        await context.wake(session_id, "submission")
    return submission, created


async def answer_question(
    context: ApiContext, session_id: str, body: AnswerRequest, by: str
) -> tuple[Submission, bool]:
    """The answer (a submission) given by ``by`` (the token's name; the body's ``by`` is
    kept beside it, unverified), and whether this request made it. An answer after a
    deadline that denies wakes the session when the denial is not on record yet: no
    Brain planned since the deadline, and one is needed to record it."""
    client = context.client
    existing = await client.get(session_id, body.request_id)
    try:
        submission = await client.answer(
            session_id,
            body.request_id,
            body.question_id,
            body.value,
            by=by,
            claimed_by=body.by,
            why=body.why,
        )
    except QuestionExpired as expired:
        if not expired.details.get("settled"):
            await context.wake(session_id, "deadline")
        raise
    if not submission.status.is_final:
        await context.wake(session_id, "answer")
    return submission, existing is None


async def settle_operation(
    context: ApiContext, session_id: str, operation_id: str, body: SettleRequest, by: str
) -> OperationView:
    """Settle the session's operation as ``by`` decided (``lifecycle.settlement``); then
    wake the session: the store holds the decision, the wake only brings a Brain."""
    store = context.store
    operation = await store.get_operation(operation_id)
    if operation is None or operation.session_id != session_id:
        raise NotFound(
            f"session {session_id!r} has no operation {operation_id!r}", operation_id=operation_id
        )
    settled = await settlement.settle(store, operation, body, decided_by=by)
    await context.wake(session_id, "settle")
    result = await store.get_operation_result(operation_id)
    handle = await store.session(session_id)
    return operation_view(settled, result, applied=await handle.is_applied(operation_id))


async def fork_session(
    context: ApiContext, session_id: str, body: ForkRequest
) -> tuple[SessionHandle, bool]:
    """The fork, and whether this request made it (a retry finds its own)."""
    store = context.store
    try:
        return await store.fork(session_id, at=body.at, into=body.into), True
    except AlreadyExists:
        existing = await store.session(body.into)
        origin = existing.state.origin
        if origin is None or (origin.session_id, origin.seq) != (session_id, body.at):
            raise
        return existing, False


async def cancel_work(
    context: ApiContext, session_id: str, body: CancelRequest
) -> tuple[CancelAccepted, bool]:
    """What the cancel did, and whether its target was already final."""
    member, key = _cancel_target(body)
    handle = await context.store.session(session_id)
    if body.request_id is not None:
        submission = await handle.submission(key)
        if submission is None:
            raise NotFound(f"session {session_id!r} has no submission {key!r}", request_id=key)
        status, final = submission.status.value, submission.status.is_final
    else:
        task = await handle.task(key)
        if task is None:
            raise NotFound(f"session {session_id!r} has no task {key!r}", task_id=key)
        status = task.outcome.value if task.outcome else task.status.value
        final = task.is_terminal
    requested = control_body(handle.state).get(member)
    already = isinstance(requested, dict) and key in requested
    if not final and not already:
        await context.client.cancel(
            session_id, request_id=body.request_id, task_id=body.task_id, reason=body.reason
        )
    if not final:
        await context.wake(session_id, "cancel")
    accepted = CancelAccepted(
        session_id=session_id,
        request_id=body.request_id,
        task_id=body.task_id,
        reason=body.reason,
        recorded=not final and not already,
        status=status,
    )
    return accepted, final


def _cancel_target(body: CancelRequest) -> tuple[str, str]:
    """The control-document member and key a cancel request writes; ``InvalidInput``
    naming the field when the target is missing, doubled or not an id."""
    if body.request_id is None and body.task_id is None:
        raise InvalidInput("a cancel needs request_id or task_id", field="request_id")
    if body.request_id is not None and body.task_id is not None:
        raise InvalidInput("a cancel takes request_id or task_id, not both", field="task_id")
    if body.request_id is not None:
        check_ids(body.request_id, "main")
        return "cancel_requests", body.request_id
    assert body.task_id is not None
    try:
        _IDENTIFIER.validate_python(body.task_id)
    except ValidationError:
        raise InvalidInput(
            f"task_id {body.task_id[:60]!r} is not allowed: use 1-200 of A-Z a-z 0-9 . _ : @ -, "
            "starting with a letter or digit",
            field="task_id",
        ) from None
    return "cancel_tasks", body.task_id
