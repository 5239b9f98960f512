"""Running an external action once, across crashes and takeovers (invariants 3, 4, 8, 11).

An operation's id is derived by the kernel from its session, its task and a key the phase
names (``operation_id``); client input never chooses it. The operation's record in the
store is the intent of every attempt: before the tool runs, the attempt is recorded with
its executor, its process and a deadline (now + the tool's timeout), and the executor
abandons the call at that deadline. What a phase finds decides what it does, by the
operation lifecycle's one table (``lifecycle.decision``, shared with the Hands; see
``docs/operations.md``): reuse a stored result (``reused``); record attempt 1 and run
(``executed``); wait, as task state, while another executor's attempt may be in flight
(``OperationInFlight``); once the attempt is over with its outcome unknown, recover by
the tool's declaration — replay-safe: run again with the same id (``replayed``); unsafe
with a query: ask (found: ``verified``; not found: run); unsafe without a query, or
``max_attempts`` made: park as uncertain (``OperationParked``) until an operator decides.

Every new attempt is a create-once revision of the record, so of several would-be
executors exactly one runs it. Under a lease (a Brain service), the drive's lease is
proven before an attempt is recorded, and the lease and the attempt's deadline (on
this host's monotonic clock) are proven again immediately before the call — and, for a
tool whose HTTP client uses ``brain.attempt.AttemptTransport``, once more at the last
moment before the request's first byte is written; otherwise the attempt is abandoned
unsent (``docs/leases.md``). The attempt's deadline, on the store's clock, travels with
such a request, so the service can refuse one that arrives after it. Results are written
once, with the session they belong to; reuse requires the same session, task, tool and
frozen arguments, and a mismatch is refused (``OperationMismatch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from opentelemetry.trace import SpanKind
from pydantic import JsonValue

from brain.attempt import Attempt
from brain.services import Services
from brain.tools import ToolSpec
from contracts import (
    AlreadyExists,
    BlobRef,
    BrainhandsError,
    ConflictError,
    ErrorInfo,
    InvalidInput,
    Operation,
    OperationMismatch,
    OperationResult,
    OperationStatus,
    OutcomeUnknown,
    Task,
    ToolFailed,
)
from contracts.model import Frozen
from contracts.tool import Dispatch
from contracts.workspace import Artifact, WorkspaceMode, WorkspaceMount, WorkspaceVersion
from coordination.leases import LeaseProof
from lifecycle.cancellation import never_ran, write_cancelled
from lifecycle.decision import Decision, Evidence, Policy, Step, decide
from runtime.incarnation import ProcessState, process_state
from runtime.tracing import TRACER, carrier
from session_store.state import SessionState

log = logging.getLogger(__name__)

RecoveryPath = Literal["executed", "verified", "replayed", "reused"]

_HANDS_PATHS = ("executed", "verified", "replayed")


def operation_id(session_id: str, task_id: str, key: str) -> str:
    """The stable id of the operation ``key`` of a task: the same inputs, the same id."""
    digest = hashlib.sha256(json.dumps([session_id, task_id, key]).encode()).hexdigest()
    return f"op-{digest[:40]}"


class Performed(Frozen):
    """An operation's output and how this phase obtained it. A large output is also kept
    in ``blob`` (referenced by the operation's result record): refer to it, don't copy."""

    operation_id: str
    path: RecoveryPath
    output: JsonValue = None
    blob: BlobRef | None = None
    #: the workspace version a ``rw`` call produced (it becomes the head when the phase's
    #: outcome applies the result: ``brain.drive``)
    version: WorkspaceVersion | None = None
    #: named outputs the call published
    artifacts: tuple[Artifact, ...] = ()


class WorkspaceBusy(BrainhandsError):
    """Another ``rw`` call of the session is pending (``operation_id``): one writer at a
    time, so this call waits — durably, on that operation — and is made from the head
    that one's applied result leaves (``docs/workspaces.md``)."""

    code = "workspace_busy"
    retryable = True

    def __init__(self, message: str, *, operation_id: str) -> None:
        super().__init__(message, operation_id=operation_id)
        self.operation_id = operation_id


class OperationParked(BrainhandsError):
    """The operation's outcome is unknown and cannot be checked; an operator must decide."""

    code = "operation_uncertain"

    def __init__(self, message: str, *, operation_id: str) -> None:
        super().__init__(message, operation_id=operation_id)
        self.operation_id = operation_id


class OperationInFlight(BrainhandsError):
    """An earlier attempt may still be running until ``until``: wait, then look again."""

    code = "operation_in_flight"

    def __init__(self, message: str, *, operation_id: str, until: datetime) -> None:
        super().__init__(message, operation_id=operation_id, until=until.isoformat())
        self.operation_id = operation_id
        self.until = until


class Dispatched(BrainhandsError):
    """A sandboxed tool's call has no result yet: commit ``dispatch`` as the operation's
    intent (an outbox message) and wait for its result; the Hands run it."""

    code = "operation_dispatched"

    def __init__(self, dispatch: Dispatch, *, released: tuple[str, ...] = ()) -> None:
        super().__init__(
            f"{dispatch.tool}@{dispatch.tool_version} ({dispatch.operation_id}) runs on the "
            "Hands; waiting for its result",
            operation_id=dispatch.operation_id,
        )
        self.dispatch = dispatch
        #: operations this call lets go of, in the same commit (``Operations.released``)
        self.released = released


class RecoveryPending(BrainhandsError):
    """The outcome is still unknown after recovering once; try again on a later attempt."""

    code = "recovery_pending"
    retryable = True


class Operations:
    """The operations of one phase run of one task."""

    def __init__(
        self,
        services: Services,
        session_id: str,
        task: Task,
        *,
        lease: LeaseProof | None = None,
        lineage: Sequence[str] = (),
        inherited: Callable[[str], bool] = lambda operation_id: False,
        state: Callable[[], SessionState] | None = None,
    ) -> None:
        self._services = services
        #: the session as last loaded (its workspace head, its pending intents)
        self._state = state
        self._session_id = session_id
        self._task = task
        #: the sessions this one was forked from (nearest first), and whether an
        #: operation id is held by the state this session started from
        self._lineage = tuple(lineage)
        self._inherited = inherited
        self._owners: dict[str, str] = {}
        #: inherited operations this phase let go of: their origin's cancellation stopped
        #: them before they ran, so the call was made again as this session's own
        self.released: list[str] = []
        #: the operation whose call was running when the phase was cancelled, if any
        self.cancelled: Operation | None = None
        # -- lease and deadline proofs (defect 20 of issue 13) --
        self._lease = lease
        #: attempts this phase run recorded: operation id -> deadline, monotonic seconds
        self._deadlines: dict[str, float] = {}

    def _prove_start(self, op_id: str, spec: ToolSpec) -> None:
        """Before an attempt is recorded: the lease is provably held; the attempt's
        deadline is counted from now on this host's monotonic clock."""
        if self._lease is not None:
            self._lease.prove(f"attempt of operation {op_id} ({spec.name})")
        self._deadlines[op_id] = time.monotonic() + spec.timeout.total_seconds()

    def _prove_send(self, op_id: str, spec: ToolSpec) -> None:
        """Immediately before the request leaves: the lease is still provably held and
        the attempt's deadline has not passed; otherwise it is abandoned unsent."""
        if self._lease is not None:
            self._lease.prove(f"request of operation {op_id} ({spec.name})")
        deadline = self._deadlines.get(op_id)
        if deadline is not None and time.monotonic() >= deadline:
            raise RecoveryPending(
                f"operation {op_id} ({spec.name}) was not sent: its attempt's deadline "
                "passed before the request could leave (this process was paused)"
            )

    # -- end of the proofs --

    def id_for(self, key: str) -> str:
        """The id of operation ``key``: in a forked session, the id its origin gave the
        operation when the fork point's state holds it (a pending intent or an applied
        result: its result is reused); otherwise this session's own (a new operation)."""
        for source in self._lineage:
            inherited = operation_id(source, self._task.id, key)
            if self._inherited(inherited):
                self._owners[inherited] = source
                return inherited
        return operation_id(self._session_id, self._task.id, key)

    async def usable_id(self, key: str) -> str:
        """``id_for(key)`` — unless a fork inherited that operation and its origin's
        cancellation stopped it before it ran: that is no outcome of the fork's call,
        which the fork then makes as its own (a new id), letting the inherited one go
        (``released``: applied in the same commit, so its intent leaves the fork)."""
        op_id = self.id_for(key)
        if self._owner(op_id) == self._session_id:
            return op_id
        result = await self._services.store.get_operation_result(op_id)
        if result is None or not never_ran(result):
            return op_id
        del self._owners[op_id]
        self.released.append(op_id)
        return operation_id(self._session_id, self._task.id, key)

    def _owner(self, op_id: str) -> str:
        """The session an operation was recorded for: this one, or for an operation
        inherited by a fork, the session it was forked from."""
        return self._owners.get(op_id, self._session_id)

    async def perform(self, tool: str, args: dict[str, Any], key: str) -> Performed:
        spec = self._services.tools.spec(tool)
        if spec is None:
            raise InvalidInput(f"unknown tool {tool!r}")
        frozen = _frozen(args)
        op_id = await self.usable_id(key)
        if spec.sandboxed:
            return await self._sandboxed(op_id, spec, frozen)
        store = self._services.store
        record = await store.get_operation(op_id)
        result = None
        if record is not None:
            self._check_same(record, tool, frozen)
            result = await store.get_operation_result(op_id)  # the store keeps it in-session
        evidence = Evidence(
            record=record,
            has_result=result is not None,
            attempt_over=self._attempt_over(record),
            now=self._services.clock(),
        )
        decision = decide(evidence, Policy.of(spec), self._services.lifecycle)
        if decision.step is Step.REUSE:
            assert result is not None
            return await self._reuse(result)
        if decision.step is Step.START and record is None:  # intent before action
            return await self._execute(await self._first_attempt(op_id, spec, frozen), spec)
        assert record is not None
        return await self._act(decision, record, spec)

    def _attempt_over(self, record: Operation | None) -> bool:
        """Whether the record's attempt is certainly over: it was this runner's and its
        call is not in flight here, or its process is gone."""
        if record is None:
            return False
        services = self._services
        if record.executor == services.runner_id and record.operation_id not in services.inflight:
            return True
        return process_state(record.process) is ProcessState.GONE

    async def _act(
        self, decision: Decision, record: Operation, spec: ToolSpec, *, again: bool = False
    ) -> Performed:
        """Do what the lifecycle decided (``lifecycle.decision``) for an operation on
        record. ``again``: this phase run already recovered once; a further unknown
        outcome is left to a later attempt of the phase."""
        op_id, step = record.operation_id, decision.step
        if step is Step.WAIT:
            assert decision.until is not None
            raise OperationInFlight(
                f"operation {op_id}: {decision.why}", operation_id=op_id, until=decision.until
            )
        if step is Step.PARKED:
            raise OperationParked(decision.why, operation_id=op_id)
        if step is Step.PARK:
            reason = f"operation {op_id} ({spec.name}): {decision.why}"
            raise OperationParked(await self._park(record, reason), operation_id=op_id)
        if step is Step.CANCELLED:
            await write_cancelled(self._services.store, record, decision.why)
            result = await self._services.store.get_operation_result(op_id)
            assert result is not None
            return await self._reuse(result)
        if step is Step.VERIFY:
            found = await self._query(record, spec)
            if found is not None:
                return found
            # not found: proof only once the attempt can no longer land (the table says)
            evidence = Evidence(
                record=record, attempt_over=True, not_found=True, now=self._services.clock()
            )
            decision = decide(evidence, Policy.of(spec), self._services.lifecycle)
            return await self._act(decision, record, spec, again=again)
        if step is Step.FAIL:
            error = ErrorInfo(
                code="attempts_exhausted",
                message=f"{spec.name}: {decision.why}",
                details={"attempts": record.attempts},
            )
            await self._finish(record, None, error)
            raise ToolFailed(error.message, **error.details)
        path: RecoveryPath = "replayed" if step is Step.REPLAY else "executed"
        return await self._execute(await self._next_attempt(record, spec), spec, path, again=again)

    async def _sandboxed(self, op_id: str, spec: ToolSpec, args: JsonValue) -> Performed:
        """The Hands' result when it is in the store; otherwise the call becomes an
        intent to commit (``Dispatched``). An intent committed earlier is dispatched
        again: a repeat is the same operation, never a second action."""
        store = self._services.store
        record = await store.get_operation(op_id)
        if record is not None:
            self._check_same(record, spec.name, args)
        result = await store.get_operation_result(op_id)
        if result is not None:
            self._services.metrics.result_seen(op_id, result.finished_at)
            performed = await self._reuse(result)
            path = result.path if result.path in _HANDS_PATHS else "executed"
            return performed.model_copy(update={"path": path})
        if record is not None and record.status is OperationStatus.UNCERTAIN:
            raise OperationParked(record.reason or "outcome unknown", operation_id=op_id)
        with TRACER.start_as_current_span(
            f"execute_tool {spec.name}",
            kind=SpanKind.PRODUCER,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": spec.name,
                "gen_ai.tool.call.id": op_id,
            },
        ):
            trace_context = carrier()
        owner = self._owner(op_id)
        mount = self._mount(op_id, spec)
        raise Dispatched(
            Dispatch(
                operation_id=op_id,
                session_id=owner,
                task_id=self._task.id,
                tool=spec.name,
                tool_version=spec.version,
                args=args,
                replay=spec.replay,
                committed_at=self._services.clock(),
                via=None if owner == self._session_id else self._session_id,
                workspace=mount,
                trace=trace_context,
            ),
            released=tuple(self.released),
        )

    def _mount(self, op_id: str, spec: ToolSpec) -> WorkspaceMount | None:
        """How the call mounts the workspace, from which version: the mount its intent
        froze when it was committed (a dispatch made again is the same call), else the
        head now. A ``rw`` call waits while another one is pending (``WorkspaceBusy``)."""
        if not spec.workspace.mounts:
            return None
        state = self._state() if self._state is not None else None
        committed = state.intents.get(op_id) if state is not None else None
        if committed is not None and committed.dispatch.workspace is not None:
            return committed.dispatch.workspace
        if spec.workspace.mode is WorkspaceMode.WRITE and state is not None:
            writer = _pending_writer(state, op_id)
            if writer is not None:
                raise WorkspaceBusy(
                    f"{spec.name} writes the workspace, which {writer} is writing now: "
                    "it waits for that call's result to be applied",
                    operation_id=writer,
                )
        return WorkspaceMount(
            mode=spec.workspace.mode,
            path=spec.workspace.path,
            base=state.workspace if state is not None else None,
            limits=self._services.workspace_limits,
        )

    def _check_same(self, record: Operation, tool: str, args: JsonValue) -> None:
        owner = self._owner(record.operation_id)
        differences = record.differences(owner, self._task.id, tool, args)
        if differences:
            raise OperationMismatch(
                f"operation {record.operation_id} was recorded with another "
                f"{', '.join(differences)} than this call ({tool} in task {self._task.id} "
                f"of session {owner}); its result cannot answer this call",
                operation_id=record.operation_id,
                differs=differences,
            )

    async def _recover(self, record: Operation, spec: ToolSpec) -> Performed:
        """Our own call ended without an answer: decide again (its attempt is over)."""
        evidence = Evidence(record=record, attempt_over=True, now=self._services.clock())
        decision = decide(evidence, Policy.of(spec), self._services.lifecycle)
        return await self._act(decision, record, spec, again=True)

    async def _execute(
        self,
        record: Operation,
        spec: ToolSpec,
        path: RecoveryPath = "executed",
        *,
        again: bool = False,
    ) -> Performed:
        try:
            return await self._attempt(record, spec, path)
        except OutcomeUnknown as error:
            if again:
                raise RecoveryPending(f"{error.message} (again while recovering)") from error
        # Our own call ended without an answer (``record`` is still the current revision:
        # nothing moves it on that path): recover now, once.
        return await self._recover(record, spec)

    async def _first_attempt(self, op_id: str, spec: ToolSpec, args: JsonValue) -> Operation:
        """Record the operation with attempt 1 before it starts (intent before action)."""
        self._prove_start(op_id, spec)
        operation = Operation(
            operation_id=op_id,
            session_id=self._owner(op_id),
            task_id=self._task.id,
            tool=spec.name,
            args=args,
            replay=spec.replay,
            status=OperationStatus.RUNNING,
            attempts=1,
            **self._attempt_fields(spec),
        )
        try:
            return await self._services.store.create_operation(operation)
        except AlreadyExists as error:
            raise self._raced(op_id, error) from error

    async def _next_attempt(self, record: Operation, spec: ToolSpec) -> Operation:
        """Record attempt n+1 before it starts; of several would-be executors exactly one
        wins it."""
        self._prove_start(record.operation_id, spec)
        try:
            return await self._services.store.transition_operation(
                record,
                OperationStatus.RUNNING,
                attempts=record.attempts + 1,
                **self._attempt_fields(spec),
            )
        except ConflictError as error:
            raise self._raced(record.operation_id, error) from error

    def _attempt_fields(self, spec: ToolSpec) -> dict[str, Any]:
        """Who makes the attempt, and until when (the store's time, on which other
        executors judge it; this process's own bound is on its monotonic clock, counted
        from before this was written: ``_prove_start``)."""
        services = self._services
        deadline = services.clock() + spec.timeout
        return {
            "executor": services.runner_id,
            "process": services.process,
            "deadline": deadline,
            "attempt_deadline": deadline,
        }

    @staticmethod
    def _raced(op_id: str, error: BrainhandsError) -> RecoveryPending:
        return RecoveryPending(
            f"another executor started operation {op_id} at the same moment ({error.code}); "
            "looking again on the next attempt"
        )

    async def _attempt(self, record: Operation, spec: ToolSpec, path: RecoveryPath) -> Performed:
        services, op_id = self._services, record.operation_id
        args: dict[str, Any] = dict(record.args) if isinstance(record.args, dict) else {}
        services.crash.reached(f"call:before:{spec.name}")
        services.inflight.add(op_id)
        attempt = Attempt(
            operation_id=op_id,
            deadline=record.deadline,
            prove=lambda: self._prove_send(op_id, spec),
        )
        try:
            # abandoned at the attempt's own bound (this host's monotonic clock)
            remaining = self._deadlines.get(op_id, time.monotonic()) - time.monotonic()
            async with asyncio.timeout(max(0.0, remaining)):
                with attempt.running():
                    self._prove_send(op_id, spec)
                    output = await services.tools.run(spec.name, args, operation_id=op_id)
        except TimeoutError:
            raise OutcomeUnknown(
                f"operation {op_id} ({spec.name}) was abandoned at its deadline "
                f"({spec.timeout.total_seconds():g} s); it may or may not have happened",
                operation_id=op_id,
            ) from None
        except (ToolFailed, InvalidInput) as error:
            await self._finish(record, None, error.info())
            raise
        except asyncio.CancelledError:
            # The drive decides what this means: a cancelled task records the call as
            # uncertain (``mark_cancelled``); an abandoned drive, like a crash, leaves the
            # attempt to the next holder's recovery.
            self.cancelled = record
            raise
        finally:
            services.inflight.discard(op_id)
        services.crash.reached(f"call:after:{spec.name}")
        blob = await self._finish(record, output, None)
        return Performed(operation_id=op_id, path=path, output=output, blob=blob)

    async def _query(self, record: Operation, spec: ToolSpec) -> Performed | None:
        services, op_id = self._services, record.operation_id
        args: dict[str, Any] = dict(record.args) if isinstance(record.args, dict) else {}
        services.crash.reached(f"call:before:query:{spec.name}")
        # no answer (``QueryUnanswered``, retryable): the phase is retried, never sends
        answer = await services.tools.query(spec.name, args, operation_id=op_id)
        services.crash.reached(f"call:after:query:{spec.name}")
        if not answer.found:
            return None
        blob = await self._finish(record, answer.output, None)
        return Performed(operation_id=op_id, path="verified", output=answer.output, blob=blob)

    async def _finish(
        self, record: Operation, output: JsonValue, error: ErrorInfo | None
    ) -> BlobRef | None:
        """Write the result once (the truth), then close the record (a convenience);
        returns the blob a large output was stored in."""
        store = self._services.store
        inline, blob = await store.put_output(output)
        await store.put_operation_result(
            OperationResult(
                operation_id=record.operation_id,
                session_id=record.session_id,
                succeeded=error is None,
                output=inline,
                blob=blob,
                error=error,
            )
        )
        status = OperationStatus.SUCCEEDED if error is None else OperationStatus.FAILED
        try:
            await store.transition_operation(record, status)
        except BrainhandsError as problem:  # the result above is what counts
            log.warning("operation %s: result stored, record not closed: %s", record, problem)
        return blob

    async def _reuse(self, result: OperationResult) -> Performed:
        if not result.succeeded:
            error = result.error or ErrorInfo(code="tool_failed", message="the tool failed")
            raise ToolFailed(error.message, **error.details)
        output = result.output
        if result.blob is not None:
            output = json.loads(await self._services.store.get_blob(result.blob))
        return Performed(
            operation_id=result.operation_id,
            path="reused",
            output=output,
            blob=result.blob,
            version=result.version,
            artifacts=result.artifacts,
        )

    async def _park(self, record: Operation, reason: str) -> str:
        """Make the operation's unknown outcome visible where operators look for it."""
        # Someone else may have moved it meanwhile; then the next look decides again.
        with contextlib.suppress(ConflictError):
            await self._services.store.transition_operation(
                record, OperationStatus.UNCERTAIN, reason=reason
            )
        return reason

    async def mark_cancelled(self) -> None:
        """The task was cancelled while ``cancelled``'s call was in flight: record that
        whether it happened is unknown (an operator decides)."""
        record = self.cancelled
        if record is None:
            return
        reason = (
            f"cancelled while the call to {record.tool} was in flight; whether it "
            "happened is unknown"
        )
        try:
            await self._services.store.transition_operation(
                record, OperationStatus.UNCERTAIN, reason=reason
            )
        except BrainhandsError:
            log.warning("could not record operation %s as uncertain", record.operation_id)


def _pending_writer(state: SessionState, op_id: str) -> str | None:
    """Another ``rw`` call of the session whose result is not applied yet, if any."""
    for other, intent in state.intents.items():
        mount = intent.dispatch.workspace
        if other != op_id and mount is not None and mount.mode is WorkspaceMode.WRITE:
            return other
    return None


def _frozen(args: dict[str, Any]) -> JsonValue:
    """The arguments as stored JSON (tuples become lists), to compare with the record."""
    frozen: JsonValue = json.loads(json.dumps(args))
    return frozen
