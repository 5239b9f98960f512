"""Which tasks can move now, and how: the task state machine as a table of rules.

``plan`` looks at a session's state and returns the steps to take, without doing any of
them. Every rule is one small function from a task to a step (or nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from brain.registry import Registry, Resolution
from contracts import JoinPolicy, Outcome, Task, TaskStatus
from session_store import SessionState

StepKind = Literal[
    "start",  # run the current phase (pending, or interrupted by a crash)
    "enter",  # a wait or sleep is over: run the next phase
    "migrate",  # bring the task to a version this Brain runs, then plan again
    "fail_crashed",  # the phase crashed its executor too often (restart limit)
    "fail_interrupted",  # the phase was started too often without an outcome (attempt limit)
    "fail_fast",  # a task it waits on failed under failFast
    "finish",  # completing, and everything it owns has settled
    "cancel",  # cancellation requested and nothing is running: settle as cancelled
    "deadline",  # a question is past its deadline: deny it or escalate it
]


@dataclass(frozen=True)
class Step:
    kind: StepKind
    task_id: str
    phase: str | None = None
    culprit: str | None = None
    after_crash: bool = False


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    next_wake_at: datetime | None = None

    def wake_at(self, moment: datetime) -> None:
        if self.next_wake_at is None or moment < self.next_wake_at:
            self.next_wake_at = moment


@dataclass(frozen=True)
class Facts:
    """What planning needs besides the state: the time, which awaited operations have a
    result, awaited tasks that already left the state for the archive, and whether the
    holder that started the interrupted phases is alive (it lost its lease: no crash)."""

    now: datetime
    settled_operations: Collection[str] = frozenset()
    archived_tasks: Mapping[str, Task] = field(default_factory=dict)
    holder_alive: bool = False


def plan(
    state: SessionState,
    registry: Registry,
    facts: Facts,
    *,
    running_here: Collection[str],
) -> Plan:
    result = Plan()
    for task in state.tasks.values():
        if task.is_terminal or task.id in running_here:
            continue
        resolution = registry.resolve(task)
        if resolution.kind is None:
            result.blocked[task.id] = resolution.blocked or "no handler"
            continue
        step = _step_for(task, resolution, state, facts, result)
        if step is not None:
            result.steps.append(step)
    return result


def _step_for(
    task: Task, resolution: Resolution, state: SessionState, facts: Facts, result: Plan
) -> Step | None:
    if resolution.migrations:
        return Step("migrate", task.id)
    if task.status is TaskStatus.COMPLETING:
        return _completing(task, state)
    if task.cancel_requested:
        return Step("cancel", task.id)
    rule = _RULES[task.status]
    return rule(task, resolution, state, facts, result)


def _pending(
    task: Task, _r: Resolution, _s: SessionState, facts: Facts, plan_: Plan
) -> Step | None:
    if task.retry_at is not None and task.retry_at > facts.now:
        plan_.wake_at(task.retry_at)
        return None
    return Step("start", task.id)


def _interrupted(
    task: Task, resolution: Resolution, _s: SessionState, facts: Facts, _p: Plan
) -> Step | None:
    # Running in the store but not here: the start left no outcome. If its holder is
    # alive it only lost the session (a pause, a blip, a FLUSHALL): start again, within
    # the kind's attempt limit. Otherwise its process died: one more crash of this phase.
    assert resolution.kind is not None
    if facts.holder_alive:
        if task.attempts >= resolution.kind.max_attempts:
            return Step("fail_interrupted", task.id)
        return Step("start", task.id)
    if task.crashes + 1 >= resolution.kind.max_crashes:
        return Step("fail_crashed", task.id)
    return Step("start", task.id, after_crash=True)


def _waiting(
    task: Task, _r: Resolution, state: SessionState, facts: Facts, plan_: Plan
) -> Step | None:
    assert task.wait is not None
    question = task.question
    if question is not None and question.deadline is not None:
        if question.deadline <= facts.now:
            return Step("deadline", task.id)
        plan_.wake_at(question.deadline)
    awaited = [
        state.tasks.get(t) or facts.archived_tasks[t]
        for t in task.wait.tasks
        if t in state.tasks or t in facts.archived_tasks
    ]
    if task.wait.join is JoinPolicy.FAIL_FAST:
        for other in awaited:
            if other.is_terminal and other.outcome is not Outcome.SUCCEEDED:
                return Step("fail_fast", task.id, culprit=other.id)
    tasks_done = len(awaited) == len(task.wait.tasks) and all(t.is_terminal for t in awaited)
    operations_done = all(op in facts.settled_operations for op in task.wait.operations)
    if tasks_done and operations_done and question is None:
        return Step("enter", task.id, phase=task.wait.next_phase)
    return None


def _sleeping(
    task: Task, _r: Resolution, _s: SessionState, facts: Facts, plan_: Plan
) -> Step | None:
    assert task.sleep is not None
    if task.sleep.until > facts.now:
        plan_.wake_at(task.sleep.until)
        return None
    return Step("enter", task.id, phase=task.sleep.next_phase)


def _completing(task: Task, state: SessionState) -> Step | None:
    owned = [t for t in state.tasks.values() if t.parent_id == task.id]
    return Step("finish", task.id) if all(t.is_terminal for t in owned) else None


Rule = Callable[[Task, Resolution, SessionState, Facts, Plan], Step | None]

_RULES: dict[TaskStatus, Rule] = {
    TaskStatus.PENDING: _pending,
    TaskStatus.RUNNING: _interrupted,
    TaskStatus.WAITING: _waiting,
    TaskStatus.SLEEPING: _sleeping,
}
