"""The task state machine's transitions, as pure edits of a commit being built.

Each function records one decision about one task in a ``CommitBuilder``; the runner
commits the result atomically. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from brain.builder import CommitBuilder
from brain.outcome import Done, Fail, Next, PhaseOutcome, Retry, Sleep, Wait
from brain.registry import TaskKind
from contracts import (
    Answer,
    ErrorInfo,
    Outcome,
    Question,
    Refused,
    SleepCondition,
    SubmissionStatus,
    Task,
    TaskStatus,
    WaitCondition,
)
from contracts.question import BY_DEADLINE, BY_KERNEL, DENY, OnDeadline, QuestionKind
from session_store.questions import asker

#: memo member of a task: the request ids of joined messages its last model call saw
INPUTS_SEEN = "inputs_seen"

_SUBMISSION_STATUS = {
    Outcome.SUCCEEDED: "answered",
    Outcome.FAILED: "failed",
    Outcome.CANCELLED: "cancelled",
}


def start(b: CommitBuilder, task_id: str, *, after_crash: bool = False) -> Task:
    """Intent before action: the attempt is on record before the phase runs.

    ``after_crash``: the previous start of this phase left no outcome (its process died);
    that start counts towards the restart limit.
    """
    task = b.task(task_id)
    return b.update(
        task_id,
        status=TaskStatus.RUNNING,
        attempts=task.attempts + 1,
        crashes=task.crashes + after_crash,
        retry_at=None,
    )


def enter(b: CommitBuilder, task_id: str, phase: str, **fields: Any) -> Task:
    """Enter ``phase`` as its first attempt (after a wait, a sleep or a previous phase)."""
    return b.update(
        task_id,
        status=TaskStatus.RUNNING,
        phase=phase,
        attempts=1,
        crashes=0,
        wait=None,
        sleep=None,
        parked=None,
        retry_at=None,
        reason=None,
        **fields,
    )


def apply_outcome(
    b: CommitBuilder, task_id: str, outcome: PhaseOutcome, kind: TaskKind, *, runner_id: str
) -> bool:
    """Record what a phase returned; True when the task continues right away."""
    task = b.task(task_id)
    memo = {**task.memo, **outcome.effects.memo}
    b.add(outcome.effects, parent_id=task_id)
    if isinstance(outcome, Next):
        enter(b, task_id, outcome.phase, memo=memo)
        return True
    if isinstance(outcome, Wait):
        if outcome.question is not None:
            _check_unique(b, task_id, outcome.question)
        condition = WaitCondition(
            tasks=outcome.tasks,
            operations=outcome.operations,
            join=outcome.join,
            question=outcome.question,
            next_phase=outcome.next_phase,
        )
        b.update(
            task_id,
            status=TaskStatus.WAITING,
            wait=condition,
            parked=outcome.parked,
            attempts=0,
            crashes=0,
            memo=memo,
            reason=outcome.reason,
        )
    elif isinstance(outcome, Sleep):
        condition_ = SleepCondition(until=outcome.until, next_phase=outcome.next_phase)
        b.update(
            task_id,
            status=TaskStatus.SLEEPING,
            sleep=condition_,
            attempts=0,
            crashes=0,
            memo=memo,
        )
    elif isinstance(outcome, Done):
        decide(b, task_id, Outcome.SUCCEEDED, runner_id=runner_id, result=outcome.result, memo=memo)
    elif isinstance(outcome, Fail):
        decide(b, task_id, Outcome.FAILED, runner_id=runner_id, error=outcome.error, memo=memo)
    else:
        _retry(b, task_id, outcome, kind, runner_id=runner_id, memo=memo)
    return False


def decide(
    b: CommitBuilder, task_id: str, outcome: Outcome, *, runner_id: str, **fields: Any
) -> Task:
    """The task's own outcome is decided: terminal now, or completing while tasks it owns
    are still open (those are asked to stop unless the task succeeded)."""
    open_children = [t for t in b.tasks() if t.parent_id == task_id and not t.is_terminal]
    if outcome is not Outcome.SUCCEEDED:
        for child in open_children:
            request_cancel(b, child.id, f"owner {task_id} {outcome.value}")
    status = TaskStatus.COMPLETING if open_children else TaskStatus.TERMINAL
    asked = b.task(task_id).question
    if asked is not None:  # it ends unanswered: say so where an answer would look
        closed = f"task {task_id} {outcome.value} before an answer"
        settle_question(
            b, task_id, Answer(question_id=asked.id, by=BY_KERNEL, why=closed, closed=True)
        )
    task = b.update(
        task_id,
        status=status,
        outcome=outcome,
        settled_by=runner_id,
        wait=None,
        sleep=None,
        parked=None,
        retry_at=None,
        **fields,
    )
    if status is TaskStatus.TERMINAL:
        settle_owner(b, task)
    return task


def settle_question(b: CommitBuilder, task_id: str, answer: Answer) -> Task:
    """Record how the task's question was settled (it then enters its next phase)."""
    task = b.task(task_id)
    return b.update(task_id, answers={**task.answers, answer.question_id: answer})


def question_deadline(b: CommitBuilder, task_id: str) -> None:
    """The task's question is past its deadline: deny it (an approval is denied, any
    other question is settled without a value), or ask it again of ``escalate_to``."""
    task = b.task(task_id)
    question, wait = task.question, task.wait
    assert question is not None and wait is not None and question.deadline is not None
    if question.on_deadline is OnDeadline.ESCALATE:
        again = question.model_copy(
            update={
                "queue": question.escalate_to,
                "deadline": None,
                "on_deadline": OnDeadline.DENY,
                "escalate_to": None,
            }
        )
        b.update(task_id, wait=wait.model_copy(update={"question": again}))
        return
    value = DENY if question.kind is QuestionKind.APPROVAL else None
    why = f"no answer by its deadline {question.deadline.isoformat()}"
    # answered at the deadline, whenever a Brain got to record it: an answer the door
    # refuses afterwards names the deadline (``session_store.questions``)
    denial = Answer(
        question_id=question.id,
        value=value,
        by=BY_DEADLINE,
        why=why,
        answered_at=question.deadline,
    )
    settle_question(b, task_id, denial)


def _check_unique(b: CommitBuilder, task_id: str, question: Question) -> None:
    if question.id in b.task(task_id).answers:
        raise Refused(
            f"question {question.id!r} was settled before: ask a new question with a new id",
            question_id=question.id,
        )
    other = asker((t for t in b.tasks() if t.id != task_id), question.id)
    if other is not None:
        raise Refused(
            f"question id {question.id!r} is taken by task {other.id}: a question's id is "
            "unique in its session (derive it from the task's id)",
            question_id=question.id,
        )


def finish(b: CommitBuilder, task_id: str) -> None:
    """A completing task's owned tasks have all settled: it becomes terminal."""
    settle_owner(b, b.update(task_id, status=TaskStatus.TERMINAL))


def request_cancel(b: CommitBuilder, task_id: str, reason: str) -> None:
    """Ask a task and everything below it to stop. Asking twice changes nothing."""
    children: dict[str, list[str]] = {}
    for task in b.tasks():
        if task.parent_id is not None:
            children.setdefault(task.parent_id, []).append(task.id)
    pending = [task_id]
    while pending:
        current = b.task(pending.pop())
        if not current.is_terminal and not current.cancel_requested:
            b.update(current.id, cancel_requested=True, reason=reason)
        pending.extend(children.get(current.id, ()))


def settle_cancelled(
    b: CommitBuilder, task_id: str, *, runner_id: str, note: str | None = None
) -> None:
    """Settle a task whose cancellation was requested; ``note`` adds what it left behind
    (e.g. an operation whose call was in flight)."""
    task = b.task(task_id)
    reason = task.reason or "cancelled"
    decide(
        b,
        task_id,
        Outcome.CANCELLED,
        runner_id=runner_id,
        reason=f"{reason}; {note}" if note else reason,
    )


def fail(b: CommitBuilder, task_id: str, error: ErrorInfo, *, runner_id: str) -> None:
    decide(b, task_id, Outcome.FAILED, runner_id=runner_id, error=error)


def settle_owner(b: CommitBuilder, task: Task) -> None:
    """A root task that settles answers the submission it was created for, in the same
    commit, and the messages that joined it (``brain.ingest``). A task that says which
    joined messages its last model call saw (memo ``inputs_seen``) answers only those;
    any other goes back to ``accepted`` and gets a turn of its own."""
    if task.parent_id is not None or task.owner_id is None or task.outcome is None:
        return
    answer = task.result if task.outcome is Outcome.SUCCEEDED else None
    submission = b.find_submission(task.owner_id)
    if submission is not None and not submission.status.is_final:
        b.update_submission(
            task.owner_id, status=_SUBMISSION_STATUS[task.outcome], answer=answer, error=task.error
        )
    seen = task.memo.get(INPUTS_SEEN)
    for joined in b.submissions():
        if joined.task_id != task.id or joined.request_id == task.owner_id:
            continue
        if joined.status.is_final:
            continue
        unseen = isinstance(seen, list) and joined.request_id not in seen
        if task.outcome is Outcome.SUCCEEDED and unseen:
            # it came after the task's last model call: it gets a turn of its own
            b.update_submission(
                joined.request_id, status=SubmissionStatus.ACCEPTED, task_id=None, handling=None
            )
            continue
        b.update_submission(
            joined.request_id,
            status=_SUBMISSION_STATUS[task.outcome],
            answer=answer,
            error=task.error,
        )


def _retry(
    b: CommitBuilder, task_id: str, outcome: Retry, kind: TaskKind, *, runner_id: str, memo: Any
) -> None:
    task = b.task(task_id)
    if task.attempts >= kind.max_attempts:
        error = ErrorInfo(
            code="attempts_exhausted",
            message=(
                f"phase {task.phase!r} gave up after {task.attempts} attempts: {outcome.reason}"
            ),
        )
        decide(b, task_id, Outcome.FAILED, runner_id=runner_id, error=error, memo=memo)
        return
    delay = outcome.delay if outcome.delay is not None else kind.backoff.delay(task.attempts)
    b.update(
        task_id,
        status=TaskStatus.PENDING,
        retry_at=b.now + delay,
        reason=outcome.reason,
        memo=memo,
    )
