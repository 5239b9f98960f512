"""Bringing one dispatched operation to a result, exactly once, whatever died before.

The store decides, the bus only delivers. For each dispatch the executor:

1. answers at once if the operation already has a result (a repeat: publish it again);
2. checks the request: a known tool at that version, arguments within the size limit and
   valid against the tool's schema — otherwise an explicit failed result, no container;
3. records the operation (create-once, from the committed intent) and **claims** it: a
   create-once revision naming this executor, so two executors never both act;
4. runs it in the sandbox by operation id. What it finds decides how:

   =====================================  ==========================================
   found                                  what happens (``path`` of the result)
   =====================================  ==========================================
   a container named for the operation    reconnect: wait for it or collect it; the
                                          action is never started again (``executed``)
   no container, no earlier attempt       start it (``executed``)
   no container, an earlier attempt      the outcome is unknown: replay-safe → run
   (its executor died before a result)    again with the same id (``replayed``);
                                          unsafe with a query → ask (``verified``,
                                          or run when not found); unsafe without →
                                          ``uncertain``, for an operator; never re-run
   =====================================  ==========================================

   A run that exits 75 (``EXIT_UNKNOWN``: the tool cannot tell whether its action
   happened, e.g. a lost response) is an unknown outcome too, recovered the same way,
   within ``MAX_ATTEMPTS`` starts.
5. writes the result once (a stale executor's later write is refused; an identical one
   is accepted), closes the record, publishes the result event, and removes the
   container.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from contracts import (
    AlreadyExists,
    BrainhandsError,
    ConflictError,
    ErrorInfo,
    InvalidInput,
    InvalidTransition,
    NotFound,
    Operation,
    OperationMismatch,
    OperationResult,
    OperationStatus,
    Refused,
    utcnow,
)
from contracts.arguments import argument_problem
from contracts.fleet import RunningOperation
from contracts.tool import (
    EXIT_UNKNOWN,
    MAX_ARGUMENT_BYTES,
    Dispatch,
    DispatchMode,
    ResultEvent,
    Termination,
    ToolDefinition,
)
from hands.claim import Claim
from hands.metrics import HandsMetrics
from hands.previews import OutputWriter
from hands.sandbox import (
    CancelledBeforeStart,
    OwnedRun,
    RunOutcome,
    RunSpec,
    RunState,
    Sandbox,
    StartMissed,
    container_name,
)
from hands.workspace.flow import NOTHING_CONCLUDED, Concluded, WorkspaceFlow, refused_result
from hands.workspace.mount import RunMount
from lifecycle.cancellation import Pause, cancelled_result, record_cancel, write_cancelled
from lifecycle.decision import Decision, Evidence, LifecycleSettings, Policy, Step, decide
from runtime.cancellation import cancel_and_wait
from runtime.crashpoints import CrashPoints
from runtime.logs import log_context
from runtime.tracing import TRACER, from_carrier
from session_store import SessionStore

log = logging.getLogger(__name__)

#: Starts of one operation before an unknown outcome is left to an operator.
MAX_ATTEMPTS = LifecycleSettings().max_attempts

Publish = Callable[[ResultEvent], Awaitable[None]]


class Busy(BrainhandsError):
    """Another executor holds the operation; look again later (at ``until`` if given:
    when its claim's deadline has passed)."""

    code = "operation_busy"
    retryable = True

    def __init__(self, message: str, *, until: datetime | None = None) -> None:
        super().__init__(message, until=until.isoformat() if until else None)
        self.until = until


class Unanswered(BrainhandsError):
    """The tool's query ran out of its time without an answer: whether the action
    happened stays unknown, so the operation is parked for an operator."""

    code = "query_unanswered"
    retryable = False


class NotCommitted(Refused):
    """A dispatch that no committed intent backs (forged, foreign or stale): refused,
    nothing recorded, nothing run."""

    code = "not_committed"


async def _no_pause(_: str) -> None:
    return None


class Duplicate(BrainhandsError):
    """This instance is already bringing the operation to a result (a repeated delivery)."""

    code = "operation_duplicate"


class Executor:
    """Runs dispatched operations for one Hands instance (``executor_id``)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        sandbox: Sandbox,
        publish: Publish,
        executor_id: str,
        crash: CrashPoints | None = None,
        clock: Callable[[], datetime] | None = None,
        lifecycle: LifecycleSettings | None = None,
        metrics: HandsMetrics | None = None,
        pause: Pause = _no_pause,
        cancel_poll: timedelta = timedelta(seconds=2),
        monotonic: Callable[[], float] = time.monotonic,
        workspaces: WorkspaceFlow | None = None,
    ) -> None:
        self.store = store
        self.sandbox = sandbox
        self.publish = publish
        self.executor_id = executor_id
        self.crash = crash or CrashPoints()
        #: the store's time (``session_store.clock``): what claims' deadlines are written
        #: and judged on, never this host's wall clock
        self.clock = clock or store.clock.now
        self.lifecycle = lifecycle or LifecycleSettings()
        self.metrics = metrics or HandsMetrics()
        #: a test hook between reading a record and writing its next revision
        self.pause = pause
        #: how often a running operation's record is read for a recorded cancellation
        self.cancel_poll = cancel_poll
        #: operations this instance is handling right now (its beat shows them)
        self.inflight: dict[str, RunningOperation] = {}
        #: this process's monotonic clock, on which its claims' own bounds count
        self.monotonic = monotonic
        #: forks a result being brought home here is announced to as well (by operation)
        self._forks: dict[str, str] = {}
        #: the workspaces of the calls that mount one (``hands.workspace.flow``)
        self.workspaces = workspaces or WorkspaceFlow.default(store)
        self.workspaces.crash = self.crash

    async def handle(self, dispatch: Dispatch) -> OperationResult | None:
        """Bring ``dispatch``'s operation to a result and announce it. None: parked as
        uncertain (an operator decides). ``Busy``: another executor holds it."""
        existing = await self.store.get_operation_result(dispatch.operation_id)
        if existing is not None:
            await self._announce(existing, via=await self._backing(dispatch))
            return existing
        if dispatch.operation_id in self.inflight:
            raise Duplicate(f"{dispatch.operation_id} is already being handled here")
        self.inflight[dispatch.operation_id] = RunningOperation(
            operation_id=dispatch.operation_id,
            tool=dispatch.tool,
            session_id=dispatch.session_id,
            since=self.clock(),
        )
        ids = {"session_id": dispatch.session_id, "task_id": dispatch.task_id}
        try:
            fork = await self._backing(dispatch)
            if fork is not None:
                self._forks[dispatch.operation_id] = fork
            with log_context(operation_id=dispatch.operation_id, **ids), _traced(dispatch) as span:
                span.set_attribute("brainhands.executor", self.executor_id)
                result = await self._handle(dispatch)
                _describe(span, None, dispatch.tool, result)
                return result
        finally:
            self.inflight.pop(dispatch.operation_id, None)
            self._forks.pop(dispatch.operation_id, None)
            self.workspaces.forget(dispatch.operation_id)

    async def _backing(self, dispatch: Dispatch) -> str | None:
        """The fork a dispatch comes from (``via``) when its log holds the intent: its
        result is announced there too, so the fork is woken at once, not by the attention
        pass. A ``via`` its log does not back is ignored (the scheduler would refuse the
        event anyway: the store decides)."""
        via = dispatch.via
        if via is None or via == dispatch.session_id:
            return None
        intent = await self.store.intent(via, dispatch.operation_id)
        return via if intent is not None else None

    async def _handle(self, dispatch: Dispatch) -> OperationResult | None:
        definition, problem = await self._check(dispatch)
        record = await self._record(dispatch, definition)
        if record.status is OperationStatus.UNCERTAIN:
            return None
        if record.status is OperationStatus.CANCELLED:  # cancelled before it ran
            return await self._settle(record, cancelled_result(record, record.reason))
        if problem is not None:
            return await self._settle(record, _refusal(dispatch, problem))
        assert definition is not None
        await self._intend(record, definition, dispatch.via)
        return await self._run(record, definition, dispatch)

    async def _intend(
        self, record: Operation, definition: ToolDefinition, via: str | None = None
    ) -> None:
        """Tell the workspaces the mount the operation's committed intent froze (read
        from the store, never taken from the message)."""
        if not definition.workspace.mounts or self.workspaces.knows(record.operation_id):
            return
        intent = await self.store.intent(via or record.session_id, record.operation_id)
        self.workspaces.intend(record.operation_id, intent.dispatch.workspace if intent else None)

    async def verify(self, operation_id: str) -> OperationResult | None:
        """Ask the tool's query entry point whether the operation happened; a found
        outcome becomes its result. None: not found (nothing is recorded). Asked only
        where the lifecycle would ask (``Busy`` while an attempt may be in flight or its
        run is still there: that attempt's executor records what happened)."""
        record, existing = await self._on_record(operation_id)
        if existing is not None:
            return existing
        definition = await self._definition(record.tool, record.tool_version)
        if not definition.queryable:
            raise _no_query(definition)
        self._may_ask(record, await self.sandbox.state(operation_id) is not None)
        claimed = record
        if record.status is OperationStatus.RUNNING:  # its attempt is over: ours meanwhile
            claimed = (await self._claim(record, definition, new_attempt=False)).record
        outcome = await self._query(claimed, definition)
        if outcome is None:
            return None
        return await self._settle(claimed, outcome, decision="verified by its query entry point")

    def _may_ask(self, record: Operation, run_exists: bool) -> None:
        """``Busy`` unless the table would verify ``record`` now: a query while its
        attempt may be in flight can only be wrong (it may land later), and a query that
        ran out of time would park a run that is still going."""
        if record.status is OperationStatus.ACCEPTED or (
            record.status is OperationStatus.RUNNING and record.attempts == 0
        ):
            raise Busy(f"operation {record.operation_id} has not started: nothing to verify")
        if record.status is not OperationStatus.RUNNING:
            return  # uncertain (an operator asks), or final (its result stands)
        mine = record.executor == self.executor_id and record.operation_id not in self.inflight
        evidence = Evidence(
            record=record, run_exists=run_exists, attempt_over=mine, now=self.clock()
        )
        decision = decide(evidence, Policy(replay=record.replay, queryable=True), self.lifecycle)
        if decision.step is Step.WAIT:
            raise Busy(f"operation {record.operation_id}: {decision.why}", until=decision.until)
        if decision.step is Step.RECONNECT:
            raise Busy(
                f"operation {record.operation_id}: its run is still there; the executor "
                "collecting it records what happened"
            )

    async def cancel(
        self, operation_id: str, reason: str, *, by: str | None = None
    ) -> OperationResult | None:
        """Cancel an operation: record it in the store first (``lifecycle.cancellation``:
        one of cancel and claim wins each revision), then stop its container if it runs
        here. The result if there is one (an operation that already had a result keeps
        it); None while a run here or elsewhere is being stopped."""
        record = await record_cancel(
            self.store, operation_id, reason, by=by or self.executor_id, pause=self.pause
        )
        return await self._stop(record)

    async def honour_cancel(self, operation_id: str) -> OperationResult | None:
        """A cancellation broadcast: acted on only when the store records it (a message
        the store does not back is refused and counted)."""
        record = await self.store.get_operation(operation_id)
        if record is None or not (record.cancel or record.status is OperationStatus.CANCELLED):
            self.metrics.refused("cancel", "not_recorded")
            log.warning("cancel of %s refused: the store records no cancellation", operation_id)
            return None
        return await self._stop(record)

    async def _stop(self, record: Operation) -> OperationResult | None:
        existing = await self.store.get_operation_result(record.operation_id)
        if existing is not None:
            await self._announce(existing)
            return existing
        if record.status is OperationStatus.CANCELLED:  # never ran: its result is due
            await write_cancelled(self.store, record, record.reason)
            return await self._stop(record)
        # a container here: stop it; its handler (here or, after a crash, the reaper)
        # records what happened
        here = await self.sandbox.state(record.operation_id) is not None
        if here and not await self.sandbox.kill(record.operation_id):
            raise Busy(f"the container of {record.operation_id} could not be removed yet")
        return None

    async def _on_record(self, operation_id: str) -> tuple[Operation, OperationResult | None]:
        """The operation (``NotFound`` unless on record) and its result, if any."""
        record = await self.store.get_operation(operation_id)
        if record is None:
            raise _not_on_record(operation_id)
        return record, await self.store.get_operation_result(operation_id)

    # -- checks ----------------------------------------------------------------------

    async def _check(self, dispatch: Dispatch) -> tuple[ToolDefinition | None, ErrorInfo | None]:
        definition = await self.store.tools.get(dispatch.tool, dispatch.tool_version)
        if definition is None:
            return None, ErrorInfo(
                code="not_found",
                message=f"tool {dispatch.tool}@{dispatch.tool_version} is not registered",
            )
        size = len(json.dumps(dispatch.args).encode())
        if size > MAX_ARGUMENT_BYTES:
            return definition, ErrorInfo(
                code="payload_too_large",
                message=(
                    f"arguments of {definition.ref} are {size:,} bytes; the limit is "
                    f"{MAX_ARGUMENT_BYTES:,}"
                ),
                details={"size": size, "limit": MAX_ARGUMENT_BYTES},
            )
        problem = argument_problem(definition.ref, definition.parameters, dispatch.args)
        return definition, problem

    async def _definition(self, tool: str, version: int | None) -> ToolDefinition:
        definition = await self.store.tools.get(tool, version)
        if definition is None:
            raise _not_registered(tool, version)
        return definition

    async def _record(
        self, dispatch: Dispatch, definition: ToolDefinition | None = None
    ) -> Operation:
        """The operation's record, created from the committed intent if this is its first
        delivery; a record of another session, task, tool or arguments is refused."""
        record = await self.store.get_operation(dispatch.operation_id)
        if record is None:
            committed = await self._committed(dispatch)
            intent = Operation(
                operation_id=committed.operation_id,
                session_id=committed.session_id,
                task_id=committed.task_id,
                tool=committed.tool,
                tool_version=committed.tool_version,
                args=committed.args,
                replay=committed.replay,
            )
            try:
                record = await self.store.create_operation(intent)
            except AlreadyExists:
                record = await self.store.get_operation(dispatch.operation_id)
                assert record is not None
        _check_same(record, dispatch)
        return record

    async def _committed(self, dispatch: Dispatch) -> Dispatch:
        """The dispatch as the session's log committed it — the log of ``via``, a fork
        making a call it inherited, when the message names one; ``NotCommitted`` when no
        committed intent matches the message (the store decides, the bus only delivers)."""
        committer = dispatch.via or dispatch.session_id
        intent = await self.store.intent(committer, dispatch.operation_id)
        if intent is None:
            raise NotCommitted(
                f"operation {dispatch.operation_id}: session {committer} has no committed "
                "intent for it; the dispatch is refused",
                operation_id=dispatch.operation_id,
            )
        differs = intent.differences(dispatch)
        if differs:
            raise NotCommitted(
                f"operation {dispatch.operation_id}: the dispatch differs from the committed "
                f"intent in its {', '.join(differs)}; it is refused",
                operation_id=dispatch.operation_id,
                differs=differs,
            )
        return intent.dispatch

    # -- running ---------------------------------------------------------------------

    async def _run(
        self, record: Operation, definition: ToolDefinition, dispatch: Dispatch
    ) -> OperationResult | None:
        """Decide by the lifecycle's table (``lifecycle.decision``) and act."""
        state = await self.sandbox.state(record.operation_id)
        evidence = Evidence(
            record=record,
            run_exists=state is not None,
            # ours and not in flight here (``inflight``): that attempt ended
            attempt_over=record.executor == self.executor_id,
            now=self.clock(),
        )
        decision = decide(evidence, Policy.of(definition), self.lifecycle)
        return await self._act(decision, record, definition)

    async def _recover(
        self, record: Operation, definition: ToolDefinition, why: str
    ) -> OperationResult | None:
        """Our own attempt ended with its outcome unknown (``why``): decide again."""
        current = await self.store.get_operation(record.operation_id) or record
        found = await self.store.get_operation_result(record.operation_id)
        evidence = Evidence(
            record=current, has_result=found is not None, attempt_over=True, now=self.clock()
        )
        decision = decide(evidence, Policy.of(definition), self.lifecycle)
        decision = decision.model_copy(update={"why": f"{why}; {decision.why}"})
        return await self._act(decision, current, definition)

    async def _act(
        self, decision: Decision, record: Operation, definition: ToolDefinition
    ) -> OperationResult | None:
        step = decision.step
        if step is Step.WAIT:
            raise Busy(f"operation {record.operation_id}: {decision.why}", until=decision.until)
        if step is Step.PARKED:
            return None
        if step is Step.PARK:
            await self._park(record, decision.why)
            return None
        if step is Step.CANCELLED:
            return await self._settle_cancelled(record)
        if step is Step.REUSE:
            return await self.store.get_operation_result(record.operation_id)
        if step is Step.RECONNECT:
            claim = await self._claim(record, definition, new_attempt=False)
            self.crash.reached("hands:claimed")
            mount = self.workspaces.attach(claim.record)
            try:
                outcome = await self._sandboxed(
                    claim.record,
                    definition,
                    DispatchMode.RUN,
                    collect=True,
                    guard=claim,
                    mount=mount,
                )
            except CancelledBeforeStart as cancelled:  # a run created, never started
                return await self._settle_cancelled(cancelled.record)
            except StartMissed as missed:
                raise Busy(missed.message) from missed
            return await self._finish(claim.record, definition, outcome, "executed")
        if step is Step.VERIFY:
            return await self._verify_then(record, definition)
        if step is Step.FAIL:
            return await self._settle(record, _exhausted(record, decision.why))
        path = "replayed" if step is Step.REPLAY else "executed"
        return await self._start(record, definition, path)

    async def _verify_then(
        self, record: Operation, definition: ToolDefinition
    ) -> OperationResult | None:
        """Ask the query (under a claim of ours, so no other executor acts meanwhile);
        found: its result; not found: the table decides again (wait, start, or fail)."""
        claimed = (await self._claim(record, definition, new_attempt=False)).record
        try:
            found = await self._query(claimed, definition)
        except Unanswered:
            return None  # parked: uncertain, for an operator
        if found is not None:
            return await self._settle(claimed, found)
        evidence = Evidence(record=claimed, attempt_over=True, not_found=True, now=self.clock())
        decision = decide(evidence, Policy.of(definition), self.lifecycle)
        return await self._act(decision, claimed, definition)

    async def _start(
        self, record: Operation, definition: ToolDefinition, path: str
    ) -> OperationResult | None:
        """Claim a new attempt and start its run — only once the claim is proved again
        immediately before the start (``hands.claim``): a cancellation recorded meanwhile
        wins, a claim taken over meanwhile starts nothing."""
        claim = await self._claim(record, definition, new_attempt=True)
        self.crash.reached("hands:claimed")
        await self.pause("start:read")
        try:  # after the claim (no other executor acts), before the claim's start is proved
            mount = await self.workspaces.prepare(claim.record)
        except Refused as refused:  # the base names what a workspace may not hold
            return await self._settle(claim.record, refused_result(claim.record, refused))
        try:
            outcome = await self._sandboxed(
                claim.record, definition, DispatchMode.RUN, guard=claim, mount=mount
            )
        except CancelledBeforeStart as cancelled:
            return await self._settle_cancelled(cancelled.record)
        except StartMissed as missed:
            raise Busy(missed.message) from missed
        return await self._finish(claim.record, definition, outcome, path)

    async def _settle_cancelled(self, record: Operation) -> OperationResult:
        """Cancelled before its run started: ``cancelled`` is what happened."""
        with contextlib.suppress(ConflictError, InvalidTransition):
            record = await self.store.transition_operation(
                record, OperationStatus.CANCELLED, reason=record.cancel, **_decided(record, self)
            )
        return await self._settle(record, cancelled_result(record, record.cancel))

    async def _park(self, record: Operation, reason: str) -> None:
        reason = f"operation {record.operation_id} ({record.tool}): {reason}"
        for _ in range(5):  # a revision written meanwhile (a recorded cancel): re-read
            try:
                await self.store.transition_operation(
                    record, OperationStatus.UNCERTAIN, reason=reason
                )
                break
            except InvalidTransition:
                return  # final or already uncertain: what is recorded stands
            except ConflictError:
                current = await self.store.get_operation(record.operation_id)
                if current is None:
                    return
                record = current
        self.metrics.parked(record.tool)
        log.warning("%s", reason)

    async def _claim(
        self, record: Operation, definition: ToolDefinition, *, new_attempt: bool
    ) -> Claim:
        claiming: dict[str, bool | str] = {
            "brainhands.new_attempt": new_attempt,
            "brainhands.executor": self.executor_id,
        }
        with TRACER.start_as_current_span("claim", attributes=claiming):
            claim = await self._claim_record(record, definition, new_attempt=new_attempt)
        trace.get_current_span().set_attribute("brainhands.attempt", claim.record.attempts)
        return claim

    async def _claim_record(
        self, record: Operation, definition: ToolDefinition, *, new_attempt: bool
    ) -> Claim:
        """A create-once revision naming this executor; of several claimers one wins.
        Its deadline is on the store's clock; this executor's own bounds on it count on
        its monotonic clock from just before the write (``hands.claim``)."""
        sent_at = self.monotonic()
        timeout = timedelta(seconds=definition.timeout_s)
        deadline = Claim.deadline_at(self.clock(), timeout, self.lifecycle)
        await self.pause("claim:read")
        try:
            claimed = await self.store.transition_operation(
                record,
                OperationStatus.RUNNING,
                executor=self.executor_id,
                process=None,
                deadline=deadline,
                # the deadline of the attempt that ran the action (a record that names
                # none: its own deadline was that attempt's)
                attempt_deadline=(
                    deadline if new_attempt else record.attempt_deadline or record.deadline
                ),
                attempts=record.attempts + (1 if new_attempt else 0),
            )
        except ConflictError as error:
            raise Busy(
                f"operation {record.operation_id} was claimed by another executor"
            ) from error
        return Claim(
            self.store,
            claimed,
            definition,
            settings=self.lifecycle,
            sent_at=sent_at,
            monotonic=self.monotonic,
        )

    async def _sandboxed(
        self,
        record: Operation,
        definition: ToolDefinition,
        mode: DispatchMode,
        *,
        collect: bool = False,
        guard: Claim | None = None,
        mount: RunMount | None = None,
    ) -> RunOutcome:
        """Run (or, with ``collect``, only collect: never start) the operation's run;
        ``guard``: the claim proved again right before anything starts."""
        deadline = record.deadline if mode is DispatchMode.RUN else None
        if deadline is None:  # a query: its own timeout, started now
            timeout = timedelta(seconds=definition.timeout_s)
            deadline = Claim.deadline_at(self.clock(), timeout, self.lifecycle)
        spec = RunSpec(
            operation_id=record.operation_id,
            session_id=record.session_id,
            tool=definition,
            args=record.args,
            mode=mode,
            executor=self.executor_id,
            deadline=deadline,
            collect_only=collect,
            workspace=mount,
        )
        self.crash.reached(f"hands:before_start:{mode.value}")
        watch = (
            asyncio.create_task(self._watch_cancel(record.operation_id))
            if mode is DispatchMode.RUN
            else None
        )
        previews = OutputWriter(self.store, record) if mode is DispatchMode.RUN else None
        saving = asyncio.create_task(previews.run()) if previews is not None else None
        asked = utcnow()  # (compared with the engine's stamp of the start: this host's)
        try:
            running = {"brainhands.mode": mode.value, "brainhands.collect_only": collect}
            with TRACER.start_as_current_span("sandbox run", attributes=running) as span:
                outcome = await self.sandbox.run(
                    spec, log=previews.log if previews else None, guard=guard
                )
                span.set_attributes(
                    {
                        "brainhands.container": outcome.container or "",
                        "brainhands.termination": outcome.termination.value,
                    }
                )
            started = outcome.started_at
            if not collect and started is not None and started >= asked:  # not a reconnect
                self.metrics.sandbox_started((started - asked).total_seconds())
            return outcome
        except NotFound as error:  # e.g. the pinned image was removed from this host
            return RunOutcome(
                termination=Termination.SANDBOX_ERROR,
                container=container_name(record.operation_id, mode),
                detail=f"{definition.image} ({definition.image_id}): {error.message}",
            )
        except Refused as error:  # e.g. the name is held by a container that is not ours
            return RunOutcome(
                termination=Termination.SANDBOX_ERROR,
                container=container_name(record.operation_id, mode),
                detail=f"refused at run time: {error.message}",
            )
        finally:
            if watch is not None:
                await cancel_and_wait(watch)
            if saving is not None and previews is not None:
                await cancel_and_wait(saving)
                await previews.finish()

    async def _watch_cancel(self, operation_id: str) -> None:
        """While a run is in flight here, stop it once the store records a cancellation
        (the broadcast only makes this sooner)."""
        while True:
            await asyncio.sleep(self.cancel_poll.total_seconds())
            try:
                record = await self.store.get_operation(operation_id)
                if record is not None and record.cancel:
                    await self.sandbox.kill(operation_id)
                    return
            except BrainhandsError as error:
                log.warning("%s: cannot look for a cancellation: %s", operation_id, error.message)

    async def _query(self, record: Operation, definition: ToolDefinition) -> OperationResult | None:
        """Run the query entry point; the found outcome as a result, or None."""
        if not definition.queryable:
            raise _no_query(definition)
        outcome = await self._sandboxed(record, definition, DispatchMode.QUERY)
        await self.sandbox.remove(record.operation_id, DispatchMode.QUERY)
        answer = outcome.output if isinstance(outcome.output, dict) else {}
        if outcome.termination is Termination.TIMEOUT:
            # Asking again would only spend another timeout: an operator decides.
            why = (
                f"its query did not answer within {definition.timeout_s} s; whether the "
                "action happened is unknown"
            )
            await self._park(record, why)
            raise Unanswered(f"operation {record.operation_id}: {why}")
        if outcome.termination is not Termination.EXITED or outcome.exit_code != 0:
            raise Busy(
                f"the query of {record.operation_id} did not answer "
                f"({outcome.termination.value}, exit {outcome.exit_code}): {outcome.detail}"
            )
        if not answer.get("found"):
            return None
        return await self._result(record, outcome, "verified", output=answer.get("output"))

    async def _finish(
        self, record: Operation, definition: ToolDefinition, outcome: RunOutcome, path: str
    ) -> OperationResult | None:
        """Bring the run to its result; its workspace's tree is kept (known to equal a
        version) or removed either way."""
        await self._intend(record, definition)
        try:
            return await self._finish_run(record, definition, outcome, path)
        finally:
            await self.workspaces.release(record)
            self.workspaces.forget(record.operation_id)  # (the reaper's collects too)

    async def _finish_run(
        self, record: Operation, definition: ToolDefinition, outcome: RunOutcome, path: str
    ) -> OperationResult | None:
        current = await self.store.get_operation(record.operation_id) or record
        existing = await self.store.get_operation_result(record.operation_id)
        if existing is not None:  # another Hands collected it first: its result stands
            await self._close(current, existing, None)
            return existing
        if current.status.is_final:
            return None
        interrupted = outcome.termination is Termination.INTERRUPTED
        # removed under us with no cancellation recorded (another Hands' reaper took it
        # for overdue, an operator): whether its action happened is unknown
        vanished = outcome.termination is Termination.CANCELLED and not current.cancel
        unknown = (
            interrupted
            or vanished
            or (outcome.termination is Termination.EXITED and outcome.exit_code == EXIT_UNKNOWN)
        )
        if current.cancel and (unknown or outcome.termination is Termination.CANCELLED):
            await self.sandbox.remove(record.operation_id)
            await self._park(
                current,
                f"attempt {current.attempts} was stopped while running ({current.cancel}); "
                "whether its effect happened is unknown",
            )
            return None
        if unknown:
            await self.sandbox.remove(record.operation_id)
            said = outcome.output.get("error") if isinstance(outcome.output, dict) else None
            why = f"attempt {record.attempts} reported its outcome unknown ({said or 'exit 75'})"
            if interrupted or vanished:
                why = f"attempt {record.attempts} was {outcome.detail}; its outcome is unknown"
            return await self._recover(record, definition, why)
        concluded = await self.workspaces.conclude(record, outcome)
        if concluded.lost:  # ran here before a crash, its tree gone: what it wrote is lost
            await self.sandbox.remove(record.operation_id)
            why = f"attempt {record.attempts}'s workspace tree is not on this Hands"
            return await self._recover(record, definition, why)
        result = await self._result(record, outcome, path, concluded=concluded)
        self.crash.reached("hands:collected")
        settled = await self._settle(record, result)
        await self.sandbox.remove(record.operation_id)
        return settled

    async def _result(
        self,
        record: Operation,
        outcome: RunOutcome,
        path: str,
        *,
        output: Any = None,
        concluded: Concluded = NOTHING_CONCLUDED,
    ) -> OperationResult:
        """The result of a run; a verified run's output is what the query found; a run
        that mounts a workspace carries what it became (a refused or oversized tree fails
        the result with its code, and no version)."""
        verified = path == "verified"
        exited_ok = outcome.termination is Termination.EXITED and outcome.exit_code == 0
        succeeded = (verified or exited_ok) and concluded.error is None
        problem = concluded.error or (None if succeeded else _error_of(record, outcome))
        inline, blob = await self.store.put_output(output if verified else outcome.output)
        return OperationResult(
            operation_id=record.operation_id,
            session_id=record.session_id,
            succeeded=succeeded,
            output=inline,
            blob=blob,
            error=problem,
            version=concluded.version,
            artifacts=concluded.artifacts,
            termination=outcome.termination.value,
            exit_code=outcome.exit_code,
            log_tail=outcome.log_tail,
            truncated=outcome.truncated,
            path=path,
            executor=self.executor_id,
            container=outcome.container,
            started_at=outcome.started_at,
        )

    async def _settle(
        self, record: Operation, result: OperationResult, *, decision: str | None = None
    ) -> OperationResult:
        """Write the result once (the truth), close the record, announce it."""
        try:
            stored = await self.store.put_operation_result(result)
            self.metrics.observe(stored, tool=record.tool)
        except AlreadyExists:
            # Another executor (or a stale one of ours) wrote first: its result stands.
            found = await self.store.get_operation_result(result.operation_id)
            assert found is not None
            stored = found
        self.crash.reached("hands:result_written")
        await self._close(record, stored, decision)
        await self._announce(stored)
        return stored

    async def _close(
        self, record: Operation, result: OperationResult, decision: str | None
    ) -> None:
        status = _STATUS_OF.get(result.termination or "") or (
            OperationStatus.SUCCEEDED if result.succeeded else OperationStatus.FAILED
        )
        for _ in range(5):  # a revision written meanwhile (a claim, a cancel): re-read
            current = await self.store.get_operation(record.operation_id) or record
            if current.status.is_final:
                return
            extra: dict[str, Any] = {}
            if current.status is OperationStatus.UNCERTAIN:
                extra = {"decided_by": self.executor_id, "decision": decision or "result found"}
            try:
                await self.store.transition_operation(current, status, **extra)
                return
            except InvalidTransition:
                return
            except ConflictError:
                continue

    async def _announce(self, result: OperationResult, *, via: str | None = None) -> None:
        """Publish the result's event to its session, and to the fork a dispatch of it
        came from (``via``, or the one its handler here recorded)."""
        fork = via or self._forks.get(result.operation_id)
        for session_id in (result.session_id, *((fork,) if fork else ())):
            event = ResultEvent(
                operation_id=result.operation_id,
                session_id=session_id,
                succeeded=result.succeeded,
                termination=Termination(result.termination) if result.termination else None,
            )
            await self.publish(event)
        self.crash.reached("hands:published")

    async def reconcile(self) -> list[str]:
        """Reap: remove containers of settled operations; collect exited ones whose
        executor died; stop ones far past their deadline or whose cancellation is
        recorded. Returns what it touched. One container's failure is logged and counted
        (``loop_errors_total{loop="reaper"}``) and the others are still reaped."""
        touched: list[str] = []
        for run in await self.sandbox.owned():
            try:
                if await self._reap(run):
                    touched.append(run.name)
            except Exception:
                self.metrics.loop_error("reaper")
                log.exception("reaping %s failed; going on with the others", run.name)
        touched += await self.workspaces.sweep(self._settled)
        return touched

    async def _settled(self, operation_id: str) -> bool:
        """Whether the operation's result is written (its run's directories may go)."""
        if operation_id in self.inflight:
            return False
        return await self.store.get_operation_result(operation_id) is not None

    async def _reap(self, run: OwnedRun) -> bool:
        if run.operation_id in self.inflight:
            return False  # its handler here brings it home
        result = await self.store.get_operation_result(run.operation_id)
        margin = self.lifecycle.takeover_margin
        overdue = run.deadline is not None and self.clock() > run.deadline + margin
        if result is not None and run.state is RunState.EXITED:
            await self.sandbox.remove(run.operation_id, run.mode)
            return True
        if result is not None:  # settled (e.g. cancelled) yet still running
            await self.sandbox.kill(run.operation_id, run.mode)
            return True
        if run.mode is not DispatchMode.RUN:
            if overdue:
                await self.sandbox.kill(run.operation_id, run.mode)
            return overdue
        record = await self.store.get_operation(run.operation_id)
        if record is None:
            return False
        if record.deadline is not None:
            # the latest claim's (a warm container bound by its name carries no deadline
            # label; a reconnect's claim moved the deadline past the container's label)
            latest = max(filter(None, (run.deadline, record.deadline)))
            overdue = self.clock() > latest + margin
        stop = record.cancel is not None or overdue
        if run.state is not RunState.EXITED and not stop:
            return False
        if run.state is not RunState.EXITED:
            await self.sandbox.kill(run.operation_id)
            if record.cancel is None:
                return True  # overdue: the next delivery finds no container and recovers
        return await self._collect(record)

    async def _collect(self, record: Operation) -> bool:
        """Collect the exited container of an operation whose executor died, in the
        operation's trace: the dispatch its session's committed intent holds carries the
        Brain's context, so the attempt that ends it joins the one that began it."""
        intent = await self.store.intent(record.session_id, record.operation_id)
        dispatch = intent.dispatch if intent is not None else None
        with _traced(dispatch) if dispatch is not None else contextlib.nullcontext() as span:
            definition = await self._definition(record.tool, record.tool_version)
            try:  # the record names who collects it, as a reconnect's does
                record = (await self._claim(record, definition, new_attempt=False)).record
            except Busy:
                return False  # its handler (or another reaper) wrote first: theirs to finish
            outcome = await self._sandboxed(record, definition, DispatchMode.RUN, collect=True)
            if outcome.absent:
                return False  # collected by its own Hands meanwhile (or killed): nothing here
            result = await self._finish(record, definition, outcome, "executed")
            if span is not None:
                _describe(span, self.executor_id, record.tool, result)
        return True


_STATUS_OF = {Termination.CANCELLED.value: OperationStatus.CANCELLED}


def _error_of(record: Operation, outcome: RunOutcome) -> ErrorInfo:
    output = outcome.output if isinstance(outcome.output, dict) else {}
    said = output.get("error")
    messages = {
        Termination.EXITED: f"exited with code {outcome.exit_code}",
        Termination.TIMEOUT: f"did not finish within its timeout ({outcome.detail})",
        Termination.OOM_KILLED: "was killed for exceeding its memory limit",
        Termination.CANCELLED: "was cancelled",
        Termination.OUTPUT_LIMIT: "printed more than its output limit and was stopped",
        Termination.INVALID_OUTPUT: "exited 0 but its output is not one JSON document",
        Termination.SANDBOX_ERROR: f"could not be run: {outcome.detail}",
        Termination.INTERRUPTED: f"was {outcome.detail}",
    }
    message = f"{record.tool} {messages[outcome.termination]}"
    if said:
        message = f"{message}: {str(said)[:500]}"
    return ErrorInfo(
        code="tool_failed" if outcome.termination is Termination.EXITED else outcome.termination,
        message=message,
        details={"termination": outcome.termination.value, "exit_code": outcome.exit_code},
    )


def _decided(record: Operation, executor: Executor) -> dict[str, str]:
    """Leaving ``uncertain`` needs a recorded decision."""
    if record.status is not OperationStatus.UNCERTAIN:
        return {}
    return {"decided_by": executor.executor_id, "decision": "cancelled"}


def _exhausted(record: Operation, why: str) -> OperationResult:
    """The result of an operation its query proved did not happen, with no start left."""
    return OperationResult(
        operation_id=record.operation_id,
        session_id=record.session_id,
        succeeded=False,
        error=ErrorInfo(
            code="attempts_exhausted",
            message=f"{record.tool}: {why}",
            details={"attempts": record.attempts},
        ),
        path="verified",
    )


def _refusal(dispatch: Dispatch, problem: ErrorInfo) -> OperationResult:
    return OperationResult(
        operation_id=dispatch.operation_id,
        session_id=dispatch.session_id,
        succeeded=False,
        error=problem,
        path="refused",
    )


def _check_same(record: Operation, dispatch: Dispatch) -> None:
    differences = record.differences(
        dispatch.session_id, dispatch.task_id, dispatch.tool, dispatch.args
    )
    if differences:
        raise OperationMismatch(
            f"operation {record.operation_id} is on record with another "
            f"{', '.join(differences)} than this dispatch; it is not run for it",
            operation_id=record.operation_id,
            differs=differences,
        )


def _not_on_record(operation_id: str) -> BrainhandsError:
    return NotFound(f"operation {operation_id!r} is not on record", operation_id=operation_id)


def _not_registered(tool: str, version: int | None) -> BrainhandsError:
    return NotFound(f"tool {tool}@{version} is not registered", tool=tool)


def _no_query(definition: ToolDefinition) -> BrainhandsError:
    return InvalidInput(f"tool {definition.ref} has no query entry point")


def _describe(span: Any, executor: str | None, tool: str, result: OperationResult | None) -> None:
    """Log the operation's end (one line per operation handled, with its ids:
    ``runtime.logs``) and put it on its ``execute_tool`` span."""
    if executor is not None:
        span.set_attribute("brainhands.executor", executor)
    if result is None:
        return
    log.info(
        "operation %s (%s): %s, %s%s",
        result.operation_id,
        tool,
        "succeeded" if result.succeeded else "failed",
        result.path,
        f", {result.termination}" if result.termination else "",
    )
    span.set_attributes(
        {
            "brainhands.result.path": result.path,
            "brainhands.result.succeeded": result.succeeded,
            "brainhands.result.termination": result.termination or "",
        }
    )


def _traced(dispatch: Dispatch) -> Any:
    """The Hands' ``execute_tool`` span of ``dispatch``, a child of the Brain's (the
    context the dispatch carries; ``runtime.tracing``)."""
    return TRACER.start_as_current_span(
        f"execute_tool {dispatch.tool}",
        context=from_carrier(dispatch.trace),
        kind=SpanKind.CONSUMER,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": dispatch.tool,
            "gen_ai.tool.call.id": dispatch.operation_id,
            "gen_ai.conversation.id": dispatch.session_id,
        },
    )
