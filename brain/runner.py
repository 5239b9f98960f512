"""The session runner: drives one session's tasks, one atomic commit per decision.

A *drive* is what a Brain does when woken for a session: claim it with a fence, then
repeatedly plan (``brain.planner``), commit the decisions together with the intents of
the phases about to run (intent before action), run those phases outside any
transaction, and commit each outcome atomically (``brain.decide``). It returns when
nothing can move, reporting blocked and parked tasks and when to wake up next. Between
drives the Brain keeps nothing: the next drive, here or on any other host, starts from
the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import Field

from brain import decide, planner
from brain.builder import CommitBuilder
from brain.context import PhaseContext, Services
from brain.operations import OperationParked
from brain.outcome import Fail, PhaseOutcome, Retry, TaskSpec, Wait
from brain.registry import Registry, TaskKind
from contracts import (
    AlreadyExists,
    BrainhandsError,
    ConflictError,
    ErrorInfo,
    FencedError,
    InvalidTransition,
    LeaseLost,
    PayloadTooLarge,
    StoreUnavailable,
    Submission,
    SubmissionStatus,
    Task,
    TaskStatus,
)
from contracts.model import Frozen
from session_store import SessionHandle, SessionStore

log = logging.getLogger(__name__)

CONTROL_DOCUMENT = "control"
_REBASES = 8


class DriveReport(Frozen):
    """What one drive of a session did and left behind."""

    session_id: str
    runner_id: str
    fence: int
    commits: int = 0
    phases: int = 0
    active: bool = False
    fenced: bool = False
    blocked: dict[str, str] = Field(default_factory=dict)
    parked: dict[str, str] = Field(default_factory=dict)
    next_wake_at: datetime | None = None


class SessionRunner:
    """Runs sessions with the task kinds of one registry; holds no session state."""

    def __init__(
        self,
        store: SessionStore,
        registry: Registry,
        services: Services,
        *,
        root_kind: str = "agent",
        poll_interval: timedelta = timedelta(milliseconds=250),
    ) -> None:
        self.store = store
        self.registry = registry
        self.services = services
        self.root_kind = root_kind
        self.poll_interval = poll_interval

    async def drive(self, session_id: str, *, fence: int | None = None) -> DriveReport:
        """Claim the session (with ``fence``, or the next fence after the stored one when
        running embedded) and move every task that can move."""
        handle = await self.store.session(session_id)
        return await _Drive(self, handle).run(fence)


class _Drive:
    def __init__(self, runner: SessionRunner, handle: SessionHandle) -> None:
        self.runner = runner
        self.handle = handle
        self.services = runner.services
        self.fence = 0
        self.commits = 0
        self.phases = 0
        self.lock = asyncio.Lock()
        self.changed = asyncio.Event()
        self.inflight: dict[str, asyncio.Task[None]] = {}
        self.handlers: dict[str, asyncio.Future[PhaseOutcome]] = {}
        self.plan = planner.Plan()

    async def run(self, fence: int | None) -> DriveReport:
        fenced = False
        try:
            await self._claim(fence)
            await self._loop()
        except FencedError:
            fenced = True
            log.warning("session %s: fenced out by a newer lease holder", self.handle.session_id)
        finally:
            await self._stop_all()
        return self._report(fenced)

    async def _loop(self) -> None:
        while True:
            self.changed.clear()
            progressed = await self._advance()
            if not self.inflight:
                if progressed or await self.handle.refresh():
                    continue
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

    async def _claim(self, fence: int | None) -> None:
        if fence is not None:
            await self.handle.claim(fence)
            self.fence = fence
        else:
            await self._claim_next()
        self.commits += 1
        self.services.crash.reached("commit:claim")

    async def _claim_next(self) -> None:
        # Embedded mode: the claim record itself arbitrates between runners.
        for _ in range(_REBASES):
            candidate = self.handle.fence + 1
            try:
                await self.handle.claim(candidate)
                self.fence = candidate
                return
            except ConflictError:
                await self.handle.refresh()
        raise LeaseLost(f"session {self.handle.session_id} is being claimed by other runners")

    async def _advance(self) -> bool:
        """Plan, commit the decisions and phase intents in one commit, launch the phases."""
        settled = await self._settled_operations()
        launch: list[str] = []

        def build(b: CommitBuilder) -> None:
            launch.clear()
            self._ingest(b)
            self.plan = planner.plan(
                b.state_view(),
                self.runner.registry,
                now=b.now,
                running_here=self.inflight.keys(),
                settled_operations=settled,
            )
            for step in self.plan.steps:
                self._apply(b, step, launch)

        committed = await self._commit(build, "kernel")
        for task_id in launch:
            self.inflight[task_id] = asyncio.create_task(self._phases(task_id))
        return committed

    def _apply(self, b: CommitBuilder, step: planner.Step, launch: list[str]) -> None:
        runner_id = self.services.runner_id
        task = b.task(step.task_id)
        if step.kind == "start":
            decide.start(b, task.id)
            launch.append(task.id)
        elif step.kind == "enter":
            assert step.phase is not None
            decide.enter(b, task.id, step.phase)
            launch.append(task.id)
        elif step.kind == "migrate":
            self._migrate(b, task)
        elif step.kind == "fail_crashed":
            error = ErrorInfo(
                code="restart_limit",
                message=f"phase {task.phase!r} crashed its executor {task.attempts} times",
                details={"phase": task.phase, "attempts": task.attempts},
            )
            decide.fail(b, task.id, error, runner_id=runner_id)
        elif step.kind == "fail_fast":
            culprit = b.task(step.culprit or "")
            error = culprit.error or ErrorInfo(
                code="subtask_failed", message=f"{culprit.id} ended {culprit.outcome}"
            )
            decide.fail(b, task.id, error, runner_id=runner_id)
        elif step.kind == "finish":
            decide.finish(b, task.id)
        else:
            decide.settle_cancelled(b, task.id, runner_id=runner_id)

    def _migrate(self, b: CommitBuilder, task: Task) -> None:
        resolution = self.runner.registry.resolve(task)
        migrated = task
        for migration in resolution.migrations:
            migrated = migration.migrate(migrated).model_copy(
                update={"version": migration.to_version}
            )
        b.update(task.id, **migrated.model_dump(exclude={"rev", "updated_at", "id"}))

    def _ingest(self, b: CommitBuilder) -> None:
        """Turn new submissions into root tasks and cancel requests into decisions."""
        state = self.handle.state
        control = state.documents.get(CONTROL_DOCUMENT)
        cancel_requests = dict(control.body.get("cancel_requests", {})) if control else {}
        cancel_tasks = dict(control.body.get("cancel_tasks", {})) if control else {}
        for submission in state.submissions.values():
            reason = cancel_requests.get(submission.request_id)
            if submission.status is SubmissionStatus.ACCEPTED and submission.task_id is None:
                if reason is not None:
                    b.update_submission(submission.request_id, status=SubmissionStatus.CANCELLED)
                    continue
                root = b.create(
                    self._root_spec(submission), parent_id=None, owner_id=submission.request_id
                )
                b.update_submission(
                    submission.request_id, status=SubmissionStatus.PROCESSING, task_id=root.id
                )
            elif reason is not None and submission.task_id is not None:
                cancel_tasks.setdefault(submission.task_id, reason)
        for task_id, reason in cancel_tasks.items():
            task = b.tasks_by_id().get(task_id)
            if task is not None and not task.is_terminal and not task.cancel_requested:
                decide.request_cancel(b, task_id, str(reason or "cancelled"))

    def _root_spec(self, submission: Submission) -> TaskSpec:
        task_id = f"root.{submission.request_id}"
        given = submission.input
        requested = given.get("task") if isinstance(given, dict) else None
        if isinstance(requested, dict):
            return TaskSpec.model_validate({"id": task_id, **requested})
        text = given.get("text") if isinstance(given, dict) else given
        return TaskSpec(
            id=task_id,
            kind=self.runner.root_kind,
            input={"conversation_id": submission.conversation_id, "text": text},
        )

    async def _phases(self, task_id: str) -> None:
        """Run the task's current phase, commit its outcome, and go on while it says Next."""
        while True:
            task = self.handle.state.tasks[task_id]
            if task.status is not TaskStatus.RUNNING or task.cancel_requested:
                return
            kind = self.runner.registry.resolve(task).kind
            assert kind is not None, "planned tasks have a handler"
            outcome = await self._run_handler(task, kind)
            if outcome is None:  # told to stop
                return
            self.phases += 1
            if not await self._commit_outcome(task, outcome, kind):
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
        try:
            await self._commit(build, label, wake=lambda: not carry_on)
        except (PayloadTooLarge, InvalidTransition, AlreadyExists) as error:
            # The outcome cannot be recorded as it is (too large, or contradicting the
            # session): record that clearly instead of losing it or crashing the drive.
            log.error("outcome of %s/%s refused: %s", task.id, task.phase, error.message)
            refused = Fail(error=ErrorInfo(code=error.code, message=error.message))

            def record_refusal(b: CommitBuilder) -> None:
                decide.apply_outcome(b, task.id, refused, kind, runner_id=self.services.runner_id)

            carry_on = False
            await self._commit(record_refusal, label)
        return carry_on

    async def _run_handler(self, task: Task, kind: TaskKind) -> PhaseOutcome | None:
        handler = kind.phases[task.phase]
        context = PhaseContext(task, self.handle, self.services)
        running = asyncio.ensure_future(handler(context))
        self.handlers[task.id] = running
        try:
            return await running
        except asyncio.CancelledError:
            if running.cancelled():
                return None  # cancellation requested for this task: do not record an outcome
            raise
        except OperationParked as parked:
            return Wait(
                operations=(parked.operation_id,),
                next_phase=task.phase,
                reason=f"uncertain: {parked.message}",
            )
        except BrainhandsError as error:
            if error.retryable:
                return Retry(reason=f"{error.code}: {error.message}")
            return Fail(error=error.info())
        except Exception as error:  # a bug or an unexpected failure: bounded retries
            log.exception("phase %s of task %s raised", task.phase, task.id)
            return Retry(reason=f"{type(error).__name__}: {error}")
        finally:
            self.handlers.pop(task.id, None)

    async def _commit(
        self,
        build: Callable[[CommitBuilder], None],
        label: str,
        wake: Callable[[], bool] = lambda: True,
    ) -> bool:
        """Build against the newest state and commit; rebuild after a lost race with an
        unfenced writer. A newer fence ends the drive (``FencedError``)."""
        async with self.lock:
            for _ in range(_REBASES):
                builder = CommitBuilder(self.handle.state, self.services.clock())
                build(builder)
                commit = builder.build()
                if commit.is_empty:
                    return False
                try:
                    await self.handle.commit(commit, fence=self.fence)
                except ConflictError as error:
                    if error.code != ConflictError.code:
                        raise
                    await self.handle.refresh()
                    continue
                self.commits += 1
                self.services.crash.reached(f"commit:{label}")
                self._stop_cancelled()
                if wake() or any(t.rev == 1 for t in commit.tasks):
                    self.changed.set()
                return True
        raise StoreUnavailable(f"could not commit to {self.handle.session_id}: too many races")

    def _stop_cancelled(self) -> None:
        """Tell active phases of tasks whose cancellation was just committed to stop."""
        for task_id, running in list(self.handlers.items()):
            if self.handle.state.tasks[task_id].cancel_requested:
                running.cancel()

    async def _settled_operations(self) -> set[str]:
        waited = {
            operation
            for task in self.handle.state.tasks.values()
            if task.status is TaskStatus.WAITING and task.wait is not None
            for operation in task.wait.operations
        }
        settled = set()
        for operation in sorted(waited):
            if await self.runner.store.get_operation_result(operation) is not None:
                settled.add(operation)
        return settled

    def _reap(self) -> None:
        for task_id, running in list(self.inflight.items()):
            if running.done():
                del self.inflight[task_id]
                running.result()  # re-raise FencedError and real failures

    async def _stop_all(self) -> None:
        for running in self.inflight.values():
            running.cancel()
        for running in self.inflight.values():
            with contextlib.suppress(asyncio.CancelledError, BrainhandsError):
                await running
        self.inflight.clear()

    def _report(self, fenced: bool) -> DriveReport:
        state = self.handle.state
        parked = {
            task.id: task.reason or ""
            for task in state.tasks.values()
            if task.status is TaskStatus.WAITING and (task.reason or "").startswith("uncertain")
        }
        return DriveReport(
            session_id=state.session_id,
            runner_id=self.services.runner_id,
            fence=self.fence,
            commits=self.commits,
            phases=self.phases,
            active=state.is_active,
            fenced=fenced,
            blocked=self.plan.blocked,
            parked=parked,
            next_wake_at=self.plan.next_wake_at,
        )
