"""One drive of one session: look, claim, then plan, commit and run phases until nothing
moves.

A drive first plans read-only: a session with nothing to do (it sleeps, or waits on
results that are not in) is left as it is — no claim, no commit — so an idle session's
log does not grow however often it is woken. Only then does it claim the session. Each
pass plans (``brain.planner``), commits its decisions together with the intents of
the phases about to run (intent before action), and launches those phases; each phase's
outcome is committed atomically the moment it returns (``brain.decide``). Commits go
through one lock and are rebuilt from the newest state after a lost seq race. An
outcome the store refuses — it contradicts the session, or is too large — fails that
task with the reason and never disturbs its siblings; a newer fence ends the drive, and
so does a lease this process can no longer prove (``LeaseProof``), checked before every
phase start and tool call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from pydantic import JsonValue

from brain import decide, planner
from brain.agent import AGENT
from brain.builder import CommitBuilder
from brain.context import CallInterrupted, PhaseContext
from brain.ingest import ingest, root_task_id
from brain.operations import Dispatched, OperationInFlight, OperationParked, WorkspaceBusy
from brain.outcome import Effects, Fail, Next, PhaseOutcome, Retry, Wait
from brain.progress import Progress
from brain.registry import TaskKind
from brain.reservations import Reservations
from bus import CANCEL_SUBJECT, dispatch_subject
from contracts import (
    BrainhandsError,
    ConflictError,
    ErrorInfo,
    FencedError,
    Intent,
    InvalidInput,
    LeaseLost,
    NotFound,
    OperationStatus,
    OutboxMessage,
    Parked,
    Refused,
    StoreUnavailable,
    Task,
    TaskStatus,
)
from contracts.tool import Cancellation
from coordination.leases import LeaseProof
from runtime.cancellation import cancel_and_wait
from runtime.logs import log_context
from runtime.tracing import TRACER, phase_span, wait_span
from runtime.tracing import flush as flush_spans
from session_store import SessionHandle

if TYPE_CHECKING:
    from brain.runner import SessionRunner

log = logging.getLogger(__name__)

_REBASES = 8
#: the label of deferred commits: previews only (``brain.progress``)
PROGRESS_LABEL = "progress"
# What the store answers when a write contradicts the session (or is malformed, or too
# large): deciding again from a reloaded state gives the same answer.
REFUSALS = (Refused, InvalidInput, NotFound)

#: whether a Brain incarnation (a runner id) is alive
HolderAlive = Callable[[str], Awaitable[bool]]


class Drive:
    def __init__(
        self,
        runner: SessionRunner,
        handle: SessionHandle,
        *,
        lease: LeaseProof | None = None,
        holder_alive: HolderAlive | None = None,
    ) -> None:
        self.runner = runner
        self.handle = handle
        self.services = runner.services
        self.lease = lease
        self._holder_alive = holder_alive
        #: who claimed the session before this drive: it started any interrupted phase
        self.previous_holder = handle.holder
        self._previous_alive: bool | None = None
        #: the facts of the read-only look, used by the first planning pass
        self._looked: planner.Facts | None = None
        self.fence = 0
        self.commits = 0
        self.phases = 0
        self.lock = asyncio.Lock()
        self.changed = asyncio.Event()
        self.inflight: dict[str, asyncio.Task[None]] = {}
        #: tasks whose wait the commit being built ends (``_trace_waits``)
        self._ended_waits: list[Task] = []
        self.handlers: dict[str, asyncio.Future[PhaseOutcome]] = {}
        #: what each running handler was given: a new message interrupts its call there
        self.contexts: dict[str, PhaseContext] = {}
        self.cancel_notes: dict[str, str] = {}
        #: tasks whose running phase was stopped because their cancellation was committed
        self.stopped: set[str] = set()
        self.refused: dict[str, ErrorInfo] = {}
        #: tasks a new message asked to interrupt (in the last planning pass built)
        self._interrupts: set[str] = set()
        self.plan = planner.Plan()
        #: previews of running phases, written by deferred commits (``brain.progress``)
        self.progress = Progress(self.services.progress)
        #: model calls in flight, held at their estimates (``brain.reservations``)
        self.reservations = Reservations()
        self._progress_writer: asyncio.Task[None] | None = None
        #: awaited operations without a result at the last planning pass
        self.awaiting: set[str] = set()
        #: of those, the ones their executor parked as uncertain: operation -> reason
        self.uncertain: dict[str, str] = {}

    async def run(self, fence: int | None) -> bool:
        """Drive until nothing can move; False when a newer holder fenced this one out or
        this process can no longer prove its lease."""
        try:
            if await self.idle():
                self.fence = self.handle.fence if fence is None else fence
                return True  # nothing to do: nothing written, not even a claim
            await self._claim(fence)
            self._progress_writer = asyncio.ensure_future(self.progress.run(self._write_progress))
            await self._loop()
        except FencedError as error:
            log.warning("session %s: fenced out: %s", self.handle.session_id, error.message)
            return False
        except LeaseLost as error:
            if self.lease is None:  # embedded: contested claims are the caller's to see
                raise
            log.warning("session %s: drive abandoned: %s", self.handle.session_id, error.message)
            return False
        finally:
            await self._stop_all()
        return True

    async def _loop(self) -> None:
        while True:
            self.changed.clear()
            await self._relay()
            progressed = await self._advance()
            if not self.inflight:
                if progressed or await self.handle.refresh():
                    continue
                await self._relay()
                return
            waiter = asyncio.ensure_future(self.changed.wait())
            done, _ = await asyncio.wait(
                {*self.inflight.values(), waiter},
                timeout=self.runner.poll_interval.total_seconds(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            waiter.cancel()
            self._reap()
            if not done:
                async with self.lock:  # news from other writers: submissions, cancels
                    await self.handle.refresh()

    async def _write_progress(self) -> None:
        """A deferred commit: the pending previews and nothing else."""
        await self._commit(lambda b: None, PROGRESS_LABEL, wake=lambda: False)

    async def idle(self) -> bool:
        """Whether a planning pass would change nothing (read-only: commits nothing)."""
        if self.handle.state.outbox and self.services.relay is not None:
            return False
        facts = self._looked = await self._facts()
        builder = CommitBuilder(self.handle.state, self.services.clock())
        self._plan_into(builder, facts, [])
        return builder.build().is_empty

    def _prove(self, action: str) -> None:
        if self.lease is not None:
            self.lease.prove(action)

    async def _claim(self, fence: int | None) -> None:
        holder = self.services.runner_id
        if fence is None:  # embedded: the next fence, unless this runner holds the session
            self.fence = await self._next_fence(holder)
            return
        self.fence = fence
        for _ in range(_REBASES):
            if self.handle.fence == fence and self.handle.holder == holder:
                return  # still ours; the fence rises only when the holder changes
            try:
                await self._write_claim(fence, holder)
                return
            except ConflictError:
                # a submission or a cancel took the next seq since the load: catch up
                # (a higher fence claimed meanwhile then refuses this one: FencedError)
                await self.handle.refresh()
        raise LeaseLost(f"session {self.handle.session_id}: its log moves faster than a claim")

    async def _next_fence(self, holder: str) -> int:
        for _ in range(_REBASES):
            if self.handle.holder == holder:
                return self.handle.fence
            candidate = self.handle.fence + 1
            try:
                await self._write_claim(candidate, holder)
                return candidate
            except (ConflictError, FencedError):
                await self.handle.refresh()  # another runner claimed first: look again
        raise LeaseLost(f"session {self.handle.session_id} is being claimed by other runners")

    async def _write_claim(self, fence: int, holder: str) -> None:
        await self.handle.claim(fence, holder=holder)
        self.commits += 1
        self.services.crash.reached("commit:claim")

    async def _advance(self) -> bool:
        """Plan, commit the decisions and phase intents in one commit, launch the phases."""
        facts, self._looked = self._looked or await self._facts(), None
        launch: list[str] = []

        def build(b: CommitBuilder) -> None:
            self._plan_into(b, facts, launch)

        committed = await self._commit_decisions(build)
        if committed:
            self._interrupt(self._interrupts)
            self._trace_waits()
        if launch:
            self._prove(f"starting {len(launch)} phase(s)")
        for task_id in launch:
            self.inflight[task_id] = asyncio.create_task(self._logged_phases(task_id))
        return committed

    def _trace_waits(self) -> None:
        """The waits this commit ended, as spans (``runtime.tracing.wait_span``)."""
        now = self.services.clock()
        for task in self._ended_waits:
            wait, sleep = task.wait, task.sleep
            what = "sleep" if sleep is not None else "question"
            attributes: dict[str, Any] = {
                "brainhands.task.id": task.id,
                "gen_ai.conversation.id": self.handle.session_id,
            }
            if wait is not None:
                what = "operations" if wait.operations else "tasks" if wait.tasks else what
                attributes["brainhands.wait.operations"] = list(wait.operations)
                attributes["brainhands.wait.tasks"] = list(wait.tasks)
                attributes["brainhands.wait.next_phase"] = wait.next_phase
            wait_span(
                what,
                session_id=self.handle.session_id,
                root_task_id=self._root_of(task),
                since=task.updated_at,
                until=now,
                attributes=attributes,
            )
        self._ended_waits = []

    def _plan_into(self, b: CommitBuilder, facts: planner.Facts, launch: list[str]) -> None:
        launch.clear()
        self._ended_waits = []
        ingest(b, root_kind=self.runner.root_kind, refused=self.refused)
        self._interrupts = set(b.interrupts)
        self.plan = planner.plan(
            b.state_view(),
            self.runner.registry,
            dataclasses.replace(facts, now=b.now),
            running_here=self.inflight.keys(),
        )
        for step in self.plan.steps:
            self._apply(b, step, launch)

    async def _commit_decisions(self, build: Callable[[CommitBuilder], None]) -> bool:
        """Commit a planning pass; a submission whose root task the store refuses (its id
        is taken by a settled task) is answered as failed instead, and the pass rebuilt."""
        for _ in range(_REBASES):
            try:
                return await self._commit(build, "kernel")
            except Refused as error:
                request_id = self._submission_of(error)
                if request_id is None:
                    raise
                self.refused[request_id] = error.info()
        raise StoreUnavailable(f"could not plan {self.handle.session_id}: too many refusals")

    def _submission_of(self, error: Refused) -> str | None:
        key = error.details.get("key")
        for submission in self.handle.state.submissions.values():
            if root_task_id(submission.request_id) == key:
                return submission.request_id
        return None

    def _apply(self, b: CommitBuilder, step: planner.Step, launch: list[str]) -> None:
        runner_id = self.services.runner_id
        task = b.task(step.task_id)
        if step.kind == "start":
            decide.start(b, task.id, after_crash=step.after_crash)
            launch.append(task.id)
        elif step.kind == "enter":
            assert step.phase is not None
            self._ended_waits.append(task)  # traced once the commit holds
            decide.enter(b, task.id, step.phase)
            launch.append(task.id)
        elif step.kind == "migrate":
            self._migrate(b, task)
        elif step.kind == "fail_crashed":
            crashes = task.crashes + 1
            error = ErrorInfo(
                code="restart_limit",
                message=f"phase {task.phase!r} crashed its executor {crashes} times",
                details={"phase": task.phase, "crashes": crashes, "attempts": task.attempts},
            )
            decide.fail(b, task.id, error, runner_id=runner_id)
        elif step.kind == "fail_interrupted":
            error = ErrorInfo(
                code="attempt_limit",
                message=f"phase {task.phase!r} was started {task.attempts} times without an "
                "outcome (its holder lost the session each time)",
                details={"phase": task.phase, "attempts": task.attempts},
            )
            decide.fail(b, task.id, error, runner_id=runner_id)
        elif step.kind == "fail_fast":
            culprit = b.tasks_by_id().get(step.culprit or "")
            error = (culprit.error if culprit else None) or ErrorInfo(
                code="subtask_failed", message=f"{step.culprit} did not succeed"
            )
            decide.fail(b, task.id, error, runner_id=runner_id)
        elif step.kind == "finish":
            decide.finish(b, task.id)
        elif step.kind == "deadline":
            decide.question_deadline(b, task.id)
        else:
            note = self.cancel_notes.pop(task.id, None)
            self._cancel_operations(b, task)
            decide.settle_cancelled(b, task.id, runner_id=runner_id, note=note)

    def _cancel_operations(self, b: CommitBuilder, task: Task) -> None:
        """A cancelled task waiting on the Hands asks them, in the same commit (outbox),
        to stop the operations it waits on that have no result yet — its own only: a fork
        never stops an operation it inherited, which is the original session's (that one
        may still need it); the fork's intent leaves with its task."""
        if task.wait is None:
            return
        reason = task.reason or "the task waiting on it was cancelled"
        messages = tuple(
            OutboxMessage(
                id=f"{op}.cancel",
                topic=CANCEL_SUBJECT,
                payload=self._cancellation(op, reason).model_dump(mode="json"),
            )
            for op in task.wait.operations
            if op in self.awaiting
            and f"{op}.cancel" not in self.handle.state.outbox
            and self._owns(op)
        )
        if messages:
            b.add(Effects(outbox=messages), parent_id=task.id)

    def _owns(self, op: str) -> bool:
        """Whether operation ``op`` is this session's (not one a fork inherited)."""
        intent = self.handle.state.intents.get(op)
        return intent is None or intent.dispatch.session_id == self.handle.session_id

    def _cancellation(self, op: str, reason: str) -> Cancellation:
        intent = self.handle.state.intents.get(op)
        return Cancellation(
            operation_id=op,
            session_id=self.handle.session_id,
            reason=reason,
            task_id=intent.task_id if intent else None,
            tool=intent.dispatch.tool if intent else None,
        )

    def _migrate(self, b: CommitBuilder, task: Task) -> None:
        resolution = self.runner.registry.resolve(task)
        migrated = task
        for migration in resolution.migrations:
            migrated = migration.migrate(migrated).model_copy(
                update={"version": migration.to_version}
            )
        b.update(task.id, **migrated.model_dump(exclude={"rev", "updated_at", "id"}))

    async def _logged_phases(self, task_id: str) -> None:
        with log_context(session_id=self.handle.session_id, task_id=task_id):
            await self._phases(task_id)

    async def _phases(self, task_id: str) -> None:
        """Run the task's current phase, commit its outcome, and go on while it says Next."""
        while True:
            task = self.handle.state.tasks[task_id]
            if task.status is not TaskStatus.RUNNING or task.cancel_requested:
                return
            kind = self.runner.registry.resolve(task).kind
            assert kind is not None, "planned tasks have a handler"
            if not await self._run_handler(task, kind):
                return

    async def _commit_outcome(self, task: Task, outcome: PhaseOutcome, kind: TaskKind) -> bool:
        """Commit a phase's outcome; True when the task goes straight on to its next phase."""
        carry_on = False

        def build(b: CommitBuilder) -> None:
            nonlocal carry_on
            carry_on = decide.apply_outcome(
                b, task.id, outcome, kind, runner_id=self.services.runner_id
            )

        # A task going straight on to its next phase changes nothing others wait for:
        # only wake the planner when it stops, or when it created tasks.
        label = f"{task.kind}:{task.phase}"
        self.progress.settled(task.id)  # the outcome supersedes the phase's preview
        try:
            await self._commit(build, label, wake=lambda: not carry_on)
        except REFUSALS as error:
            await self._record_refusal(task, kind, error, label)
            return False
        return carry_on

    async def _record_refusal(
        self, task: Task, kind: TaskKind, error: BrainhandsError, label: str
    ) -> None:
        """The outcome cannot be recorded as it is: fail the task with the reason instead
        of losing the outcome or crashing the drive."""
        log.error("outcome of %s/%s refused: %s", task.id, task.phase, error.message)
        refused = Fail(error=ErrorInfo(code=error.code, message=error.message))

        def build(b: CommitBuilder) -> None:
            if not b.task(task.id).is_terminal:
                decide.apply_outcome(b, task.id, refused, kind, runner_id=self.services.runner_id)

        try:
            await self._commit(build, label)
        except REFUSALS as again:
            log.error("task %s: even its failure was refused: %s", task.id, again.message)

    async def _run_handler(self, task: Task, kind: TaskKind) -> bool:
        """One phase run and the commit of its outcome, traced in the trace of the task's
        root (``runtime.tracing``): the span ends when the outcome is durable. True when
        the task goes straight on to its next phase."""
        agent = kind.name == AGENT
        with phase_span(
            f"{'invoke_agent' if agent else 'run_task'} {kind.name}",
            session_id=self.handle.session_id,
            root_task_id=self._root_of(task),
            task_id=task.id,
            rev=task.rev,
            attempts=task.attempts,
            attributes={
                "gen_ai.operation.name": "invoke_agent" if agent else "run_task",
                "gen_ai.agent.name": kind.name,
                "gen_ai.conversation.id": self.handle.session_id,
                "brainhands.task.id": task.id,
                "brainhands.task.phase": task.phase,
                "brainhands.task.attempts": task.attempts,
                "brainhands.task.rev": task.rev,
                "brainhands.fence": self.fence or 0,
                "brainhands.runner": self.services.runner_id,
            },
        ):
            try:
                return await self._run_and_commit(task, kind)
            finally:  # the outcome, and the usage of the call, are committed (or never)
                self.reservations.release(task.id)

    async def _run_and_commit(self, task: Task, kind: TaskKind) -> bool:
        """The phase, then the commit of its outcome (none when the task was told to
        stop, nor when the drive is ending)."""
        outcome = await self._run_phase(task, kind)
        if outcome is None:  # told to stop
            return False
        this = asyncio.current_task()
        if this is not None and this.cancelling():
            # the drive is ending (a handler may have kept the cancel from its own
            # awaits): decide nothing
            raise asyncio.CancelledError
        self.phases += 1
        return await self._commit_outcome(task, outcome, kind)

    def _root_of(self, task: Task) -> str:
        tasks, current = self.handle.state.tasks, task
        for _ in range(len(tasks) + 1):
            parent = tasks.get(current.parent_id) if current.parent_id else None
            if parent is None:
                return current.id
            current = parent
        return current.id

    async def _run_phase(self, task: Task, kind: TaskKind) -> PhaseOutcome | None:
        handler = kind.phases[task.phase]
        context = PhaseContext(
            task,
            self.handle,
            self.services,
            lease=self.lease,
            progress=self.progress,
            reservations=self.reservations,
        )
        running = asyncio.ensure_future(handler(context))
        self.handlers[task.id], self.contexts[task.id] = running, context
        try:
            return _with_head(await running, context)
        except LeaseLost:
            raise  # this process can no longer prove its lease: decide nothing
        except CallInterrupted as interrupted:
            return self._abandoned(task, kind, interrupted.why)
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if this is not None and this.cancelling():
                raise  # the drive is abandoned (lease lost, shutdown): decide nothing
            if not running.cancelled() or task.id not in self.stopped:
                raise
            cancelled = await context.record_cancelled_call()
            if cancelled is not None:
                self.cancel_notes[task.id] = (
                    f"operation {cancelled.operation_id} ({cancelled.tool}) was in flight "
                    "when cancelled; its outcome is unknown (recorded as uncertain)"
                )
            return None  # cancellation requested for this task: do not record an outcome
        except OperationParked as parked:
            return Wait(
                operations=(parked.operation_id,),
                next_phase=task.phase,
                reason=f"uncertain: {parked.message}",
                parked=Parked(operation_id=parked.operation_id, reason=parked.message),
            )
        except Dispatched as sent:
            await flush_spans()  # the dispatch names this Brain's span: send it first
            return self._waiting_for(sent)
        except WorkspaceBusy as busy:  # one writer at a time: wait for the other's result
            return Wait(operations=(busy.operation_id,), next_phase=task.phase, reason=busy.message)
        except OperationInFlight as busy:
            return Retry(reason=busy.message, delay=busy.until - self.services.clock())
        except BrainhandsError as error:
            if error.retryable:
                return Retry(reason=f"{error.code}: {error.message}")
            return Fail(error=error.info())
        except Exception as error:  # a bug or an unexpected failure: bounded retries
            log.exception("phase %s of task %s raised", task.phase, task.id)
            return Retry(reason=f"{type(error).__name__}: {error}")
        finally:
            self.handlers.pop(task.id, None)
            self.contexts.pop(task.id, None)

    def _abandoned(self, task: Task, kind: TaskKind, why: str) -> Next:
        """A new message abandoned the phase's call: enter the phase the kind names for
        it, telling it why (and the text the call had streamed, as a record)."""
        said: dict[str, JsonValue] = {"phase": task.phase, "why": why}
        partial = self.progress.text(task.id)
        if partial:
            said["preview"] = partial
        return Next(
            phase=kind.interruptible[task.phase], effects=Effects(memo={"interrupted": said})
        )

    def _waiting_for(self, sent: Dispatched) -> Wait:
        """One commit: the intent (as the dispatch outbox message) and the task waiting on
        the operation, re-entering this phase when its result is in the store."""
        dispatch = sent.dispatch
        message = OutboxMessage(
            id=dispatch.operation_id,
            topic=dispatch_subject(dispatch.tool),
            payload=dispatch.model_dump(mode="json"),
        )
        task = self.handle.state.tasks[dispatch.task_id or ""]
        # still pending from an earlier run of this phase: the builder keeps one
        return Wait(
            operations=(dispatch.operation_id,),
            next_phase=task.phase,
            reason=sent.message,
            effects=Effects(
                outbox=(message,),
                intents=(Intent.of(dispatch),),
                applied_operations=sent.released,
            ),
        )

    async def _relay(self) -> None:
        """Publish the outbox (after its commit: persist, then adopt), then record the
        messages as sent. A crash in between publishes them again on the next drive;
        the bus drops the repeat (``Nats-Msg-Id``) and executors act on the store."""
        relay = self.services.relay
        pending = list(self.handle.state.outbox.values())
        if relay is None or not pending:
            return
        self._prove(f"publishing {len(pending)} outbox message(s)")
        try:
            sent = await relay.publish(pending)
        except StoreUnavailable as error:  # the bus is away: the outbox keeps them
            log.warning("session %s: outbox not relayed yet: %s", self.handle.session_id, error)
            return

        def build(b: CommitBuilder) -> None:
            b.mark_sent(sent)

        await self._commit(build, "relay", wake=lambda: False)

    async def _commit(
        self,
        build: Callable[[CommitBuilder], None],
        label: str,
        wake: Callable[[], bool] = lambda: True,
    ) -> bool:
        """Build against the newest state and commit; rebuild after a lost seq race with
        an unfenced writer. A newer fence ends the drive (``FencedError``)."""
        async with self.lock:
            for _ in range(_REBASES):
                builder = CommitBuilder(self.handle.state, self.services.clock())
                build(builder)
                commit = builder.build()
                if commit.is_empty and label != PROGRESS_LABEL:
                    return False
                folded = self.progress.has_news
                if folded and self.progress.fold(builder):  # previews ride along
                    commit = builder.build()
                if commit.is_empty:
                    return False
                with _commit_span(label, self.fence) as span:
                    try:
                        await self.handle.commit(commit, fence=self.fence)
                    except ConflictError:
                        span.set_attribute("brainhands.commit.conflict", True)
                        await self.handle.refresh()
                        continue
                    span.set_attribute("brainhands.seq", self.handle.seq)
                self.commits += 1
                if commit.applied_operations:
                    self.services.metrics.applied(commit.applied_operations, self.services.clock())
                if folded:
                    self.progress.written()
                self.services.crash.reached(f"commit:{label}")
                self._stop_cancelled()
                if wake() or any(t.rev == 1 for t in commit.tasks):
                    self.changed.set()
                return True
        raise StoreUnavailable(f"could not commit to {self.handle.session_id}: too many races")

    def _interrupt(self, task_ids: set[str]) -> None:
        """A committed message asked to interrupt these tasks: abandon the call of each
        running phase its kind declares interruptible (persist, then adopt). Only the
        call is abandoned (``PhaseContext.interruptible``): a call that has answered is
        recorded, and the message is handled as one that joined the task."""
        for task_id in task_ids:
            context = self.contexts.get(task_id)
            if context is None:
                continue  # nothing running here: its next phase sees the message anyway
            kind = self.runner.registry.resolve(context.task).kind
            if kind is not None and context.task.phase in kind.interruptible:
                context.interrupt("a new message interrupted it")

    def _stop_cancelled(self) -> None:
        """Tell active phases of tasks whose cancellation was just committed to stop."""
        for task_id, running in list(self.handlers.items()):
            if self.handle.state.tasks[task_id].cancel_requested:
                self.stopped.add(task_id)
                running.cancel()

    async def _facts(self) -> planner.Facts:
        """What planning needs from outside the state: which awaited operations have a
        result, and awaited tasks that left the state for the archive."""
        state = self.handle.state
        waiting = [t.wait for t in state.tasks.values() if t.status is TaskStatus.WAITING]
        operations = sorted({op for wait in waiting if wait for op in wait.operations})
        missing = sorted({t for wait in waiting if wait for t in wait.tasks} - state.tasks.keys())
        store = self.runner.store
        settled = {op for op in operations if await store.get_operation_result(op) is not None}
        self.awaiting = set(operations) - settled
        self.uncertain = await self._uncertain(self.awaiting)
        archived = {}
        for task_id in missing:
            found = await self.handle.task(task_id)
            if found is not None:
                archived[task_id] = found
        return planner.Facts(
            now=self.services.clock(),
            settled_operations=settled,
            archived_tasks=archived,
            holder_alive=await self._interrupted_by_live_holder(),
        )

    async def _interrupted_by_live_holder(self) -> bool:
        """Whether the phases running in the store but not here were interrupted while
        their holder lives (it lost the lease: not a crash). Without evidence, or when the
        holder is gone, they crashed."""
        state = self.handle.state
        interrupted = any(
            t.status is TaskStatus.RUNNING and t.id not in self.inflight
            for t in state.tasks.values()
        )
        holder = self.previous_holder
        if not interrupted or holder is None or self._holder_alive is None:
            return False
        if self._previous_alive is None:  # asked once per drive: it may take a while
            self._previous_alive = await self._holder_alive(holder)
            if self._previous_alive:
                log.info(
                    "session %s: previous holder %s is alive; its interrupted phases lost "
                    "their lease and did not crash",
                    self.handle.session_id,
                    holder,
                )
        return self._previous_alive

    async def _uncertain(self, operations: set[str]) -> dict[str, str]:
        """Awaited operations their executor (the Hands) parked: an operator decides."""
        found = {}
        for op in sorted(operations):
            record = await self.runner.store.get_operation(op)
            if record is not None and record.status is OperationStatus.UNCERTAIN:
                found[op] = record.reason or "outcome unknown"
        return found

    def _reap(self) -> None:
        for task_id, running in list(self.inflight.items()):
            if running.done():
                del self.inflight[task_id]
                running.result()  # re-raise FencedError and real failures

    async def _stop_all(self) -> None:
        writer = [self._progress_writer] if self._progress_writer is not None else []
        for error in await cancel_and_wait(*self.inflight.values(), *writer):
            if not isinstance(error, BrainhandsError):
                log.error("a phase stopped with the drive raised: %r", error)
        self.inflight.clear()


@contextlib.contextmanager
def _commit_span(label: str, fence: int | None) -> Iterator[trace.Span]:
    """A commit made inside a traced phase run is a span ``commit {label}``, a child of
    the phase's (``runtime.tracing``): the store write's own time. Outside a recorded
    span no span is made — the kernel's phases pay nothing for tracing they lack."""
    if not trace.get_current_span().is_recording():
        yield trace.INVALID_SPAN
        return
    attributes: dict[str, str | int] = {"brainhands.label": label, "brainhands.fence": fence or 0}
    with TRACER.start_as_current_span(f"commit {label}", attributes=attributes) as span:
        yield span


def _with_head(outcome: PhaseOutcome, context: PhaseContext) -> PhaseOutcome:
    """The outcome, moving the session's workspace head to the version a result it
    applies produced (the store checks that the version was made from the head)."""
    effects = getattr(outcome, "effects", None)
    if not isinstance(effects, Effects) or not context.versions:
        return outcome
    produced = [context.versions[op] for op in effects.applied_operations if op in context.versions]
    if not produced:
        return outcome
    moved = effects.model_copy(update={"workspace": produced[-1]})
    return outcome.model_copy(update={"effects": moved})
