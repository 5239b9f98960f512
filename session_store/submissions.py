"""Submitting work to a session and waiting for its answer (the Session API's core).

Ingress writers hold no lease: they commit unfenced, ordered by the log like everyone
else, and the store lets them write only submissions, user input and control-document
patches. A submission is keyed by the client's ``request_id``: submitting the same id
again — even long after it settled and left the state for the archive — returns the
original submission and creates no work. What can be checked at the door is checked
there (``session_store.intake``): a bad id or input is refused with ``InvalidInput`` naming the
field, and nothing is stored. Cancellation is a request recorded in the session's
control document; the lease holder turns it into decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import timedelta

from pydantic import JsonValue

from contracts import (
    CONTROL_DOCUMENT,
    AlreadyExists,
    Budget,
    Busy,
    Commit,
    ConflictError,
    DocumentPatch,
    Entry,
    EntryKind,
    ErrorInfo,
    Handling,
    InputPolicy,
    InvalidInput,
    NotFound,
    Submission,
    SubmissionStatus,
    TextInput,
)
from contracts.usage import BUDGET
from contracts.workspace import RETENTION, WorkspaceRetention
from session_store.handle import SessionHandle
from session_store.intake import check_ids, check_size, input_limit, read_work
from session_store.questions import answer_body, answer_commit
from session_store.state import SessionState
from session_store.store import SessionStore

_RACES = 8
#: The control document's member that says how operators settled operations.
DECISIONS = "decisions"
#: The control document's member with the session's default ``InputPolicy``.
INPUT_POLICY = "input_policy"


class SessionClient:
    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def submit(
        self,
        session_id: str,
        request_id: str,
        input: JsonValue,
        *,
        conversation_id: str = "main",
    ) -> Submission:
        """Accept ``input`` once per ``request_id``; a repeat returns the original."""
        check_ids(request_id, conversation_id)
        given = read_work(input)
        check_size(input, input_limit(self.store.settings.max_record_bytes))
        handle = await self.store.session(session_id)
        existing = await handle.submission(request_id)
        if existing is not None:
            await self._remark(handle, existing)
            return existing
        submission = Submission(request_id=request_id, conversation_id=conversation_id, input=input)
        text = given.text if isinstance(given, TextInput) else given
        entries = (
            (
                Entry(
                    id=f"in.{request_id}",
                    kind=EntryKind.USER_INPUT,
                    conversation_id=conversation_id,
                    content=text,
                ),
            )
            if isinstance(text, str)
            else ()
        )
        accept = Commit(submissions=(submission,), entries=entries)

        def build(state: SessionState) -> Commit | None:
            if request_id in state.submissions:
                return None
            if isinstance(text, str) and _rejects(state, given, conversation_id):
                return Commit(submissions=(_rejected(submission, conversation_id),))
            return accept

        try:
            landed = await _commit_unfenced(handle, build)
        except AlreadyExists:  # settled and archived meanwhile by another writer's view
            landed = False
        found = await handle.submission(request_id)
        assert found is not None, "the submission is there: ours, or the original"
        if not landed:
            await self._remark(handle, found)
        return found

    async def answer(
        self,
        session_id: str,
        request_id: str,
        question_id: str,
        value: JsonValue,
        *,
        by: str,
        claimed_by: str | None = None,
        why: str | None = None,
    ) -> Submission:
        """Accept an answer to an open question once per ``request_id`` (a repeat returns
        the original). ``by`` is who answers, as the caller authenticated them;
        ``claimed_by`` a name they gave (kept beside it, unverified). Checked against the
        question when it lands, at the store's time (stamped on the answer): ``NotFound``
        (no such question), ``QuestionClosed``, ``QuestionExpired`` (past a deadline that
        denies), ``AlreadyAnswered`` (another answer was accepted first: it names it) or
        ``InvalidInput`` (the value does not fit); then nothing is stored. The lease
        holder applies it (``brain.ingest``)."""
        check_ids(request_id, "main")
        body = answer_body(question_id, value, by, why, claimed_by=claimed_by)
        clock = self.store.clock
        await clock.fresh()  # each build below reads it again: the time of that attempt
        handle = await self.store.session(session_id)
        existing = await handle.submission(request_id)
        if existing is not None:
            await self._remark(handle, existing)
            return existing

        def build(state: SessionState) -> Commit | None:
            return answer_commit(state, request_id, body, clock.now())

        with contextlib.suppress(AlreadyExists):  # the request id settled and was archived
            await _commit_unfenced(handle, build)
        found = await handle.submission(request_id)
        assert found is not None, "the answer is there: ours, or the original"
        return found

    async def get(self, session_id: str, request_id: str) -> Submission | None:
        handle = await self.store.session(session_id)
        return await handle.submission(request_id)

    async def wait(
        self, session_id: str, request_id: str, *, within: timedelta = timedelta(minutes=5)
    ) -> Submission:
        """Poll the store until the submission is answered, failed or cancelled."""
        handle = await self.store.session(session_id)
        deadline = time.monotonic() + within.total_seconds()
        delay = 0.01
        while True:
            submission = await handle.submission(request_id)
            if submission is None:
                raise NotFound(f"no submission {request_id!r} in session {session_id}")
            if submission.status.is_final:
                return submission
            if time.monotonic() > deadline:
                raise TimeoutError(f"submission {request_id} still {submission.status.value}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
            await handle.refresh()

    async def cancel(
        self,
        session_id: str,
        *,
        request_id: str | None = None,
        task_id: str | None = None,
        reason: str = "cancelled by request",
    ) -> None:
        """Record a cancellation request; harmless to repeat."""
        if (request_id is None) == (task_id is None):
            raise InvalidInput("cancel needs exactly one of request_id and task_id")
        member = "cancel_requests" if request_id is not None else "cancel_tasks"
        patch = DocumentPatch(
            name=CONTROL_DOCUMENT,
            patch={member: {request_id or task_id or "": reason}},
            create=True,
        )
        handle = await self.store.session(session_id)
        await _commit_unfenced(handle, lambda state: Commit(documents=(patch,)))

    async def set_input_policy(self, session_id: str, policy: InputPolicy | None) -> None:
        """The session's default for messages that arrive while its agent runs (None:
        back to ``enqueue``); a message's own policy comes first."""
        value = None if policy is None else policy.value
        patch = DocumentPatch(name=CONTROL_DOCUMENT, patch={INPUT_POLICY: value}, create=True)
        handle = await self.store.session(session_id)

        def build(state: SessionState) -> Commit | None:
            said = control_member(state, INPUT_POLICY)
            return None if said == value else Commit(documents=(patch,))

        await _commit_unfenced(handle, build)

    async def set_budget(self, session_id: str, budget: Budget | None) -> None:
        """The session's model budget (None: none); the kernel checks it before every
        model call (``contracts.usage``)."""
        value = None if budget is None else budget.model_dump(mode="json", exclude_none=True)
        await self._set_object(session_id, BUDGET, value)

    async def set_retention(self, session_id: str, retention: WorkspaceRetention | None) -> None:
        """How many of its latest workspace versions the session keeps from collection
        (None: back to the default, ``WorkspaceRetention()``); said once."""
        value = None if retention is None else retention.model_dump(mode="json")
        await self._set_object(session_id, RETENTION, value)

    async def _set_object(
        self, session_id: str, member: str, value: dict[str, JsonValue] | None
    ) -> None:
        """Set an object member of the control document to ``value`` (None: remove it)."""
        patch = DocumentPatch(name=CONTROL_DOCUMENT, patch={member: value}, create=True)
        handle = await self.store.session(session_id)
        # a merge patch merges objects: clear the old value first, then set the new one
        clear = DocumentPatch(name=CONTROL_DOCUMENT, patch={member: None}, create=True)

        def build(state: SessionState) -> Commit | None:
            if control_member(state, member) == value:
                return None
            return Commit(documents=(clear, patch) if value is not None else (clear,))

        await _commit_unfenced(handle, build)

    async def report_blocked(self, session_id: str, reasons: dict[str, str] | None) -> None:
        """Record which work of the session no running Brain can run, and why (None:
        nothing is blocked any more), in its control document."""
        patch = DocumentPatch(name=CONTROL_DOCUMENT, patch={"blocked": reasons}, create=True)
        handle = await self.store.session(session_id)

        def build(state: SessionState) -> Commit | None:  # said once, also by racing writers
            return None if blocked_reasons(state) == reasons else Commit(documents=(patch,))

        await _commit_unfenced(handle, build)

    async def record_decision(
        self, session_id: str, operation_id: str, decision: dict[str, JsonValue]
    ) -> None:
        """Say in the session's log (its control document's ``decisions``) how an
        operator settled one of its operations — the record of the decision is the
        operation's; this is its notice for whoever follows the session. Said once,
        also by a retry."""
        patch = DocumentPatch(
            name=CONTROL_DOCUMENT, patch={DECISIONS: {operation_id: decision}}, create=True
        )
        handle = await self.store.session(session_id)

        def build(state: SessionState) -> Commit | None:
            control = state.documents.get(CONTROL_DOCUMENT)
            body = control.body if control is not None and isinstance(control.body, dict) else {}
            said = body.get(DECISIONS)
            if isinstance(said, dict) and said.get(operation_id) == decision:
                return None
            return Commit(documents=(patch,))

        await _commit_unfenced(handle, build)

    async def _remark(self, handle: SessionHandle, submission: Submission) -> None:
        # A resubmission may follow a crash that lost the session's index marker.
        if not submission.status.is_final:
            await self.store.index.mark(handle.session_id)


def control_member(state: SessionState, member: str) -> object:
    """A member of the session's control document (None when absent)."""
    control = state.documents.get(CONTROL_DOCUMENT)
    return control.body.get(member) if control and isinstance(control.body, dict) else None


def input_policy(state: SessionState, given: object) -> InputPolicy:
    """The policy for a message: its own, else the session's default, else enqueue."""
    own = given.policy if isinstance(given, TextInput) else None
    if own is not None:
        return own
    try:
        return InputPolicy(str(control_member(state, INPUT_POLICY)))
    except ValueError:
        return InputPolicy.ENQUEUE


def running_message(
    state: SessionState, conversation_id: str, *, besides: str | None = None
) -> Submission | None:
    """The open message (text submission) of a conversation that has (or is about to
    have) an agent task of its own: that agent is at work in the conversation."""
    for submission in state.submissions.values():
        if submission.status.is_final or submission.conversation_id != conversation_id:
            continue
        if submission.request_id == besides:
            continue
        given = submission.input
        text = isinstance(given, str) or (isinstance(given, dict) and "text" in given)
        if text and submission.handling in (None, Handling.STARTED):
            return submission
    return None


def _rejects(state: SessionState, given: object, conversation_id: str) -> bool:
    busy = running_message(state, conversation_id) is not None
    return busy and input_policy(state, given) is InputPolicy.REJECT


def _rejected(submission: Submission, conversation_id: str) -> Submission:
    running = "an agent is still answering an earlier message"
    return submission.model_copy(
        update={
            "status": SubmissionStatus.FAILED,
            "handling": Handling.REJECTED,
            "error": ErrorInfo(
                code=Busy.code,
                message=f"refused: {running} in conversation {conversation_id} "
                "(policy reject); send it again once that one is answered",
            ),
        }
    )


def blocked_reasons(state: SessionState) -> object:
    """What the session's control document says is blocked (None or empty: nothing)."""
    return control_member(state, "blocked")


async def _commit_unfenced(
    handle: SessionHandle, build: Callable[[SessionState], Commit | None]
) -> bool:
    """Commit as an ingress writer, rebuilding after each lost race; False when ``build``
    finds nothing left to write."""
    for _ in range(_RACES):
        commit = build(handle.state)
        if commit is None:
            return False
        try:
            await handle.commit(commit, fence=None)
            return True
        except ConflictError as error:
            if error.code != ConflictError.code:
                raise
            await handle.refresh()
    raise ConflictError(f"session {handle.session_id} is too busy to accept writes now")
