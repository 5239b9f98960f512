"""Finding a session's questions and judging an answer to one, the same way at the door
(the Session API, before an answer is stored) and in the kernel (before it is applied).

A question belongs to the task that asks it (its wait); its id is unique among the
session's open work. Once settled — answered, denied by its deadline, or closed because
its task ended — the settlement stays on the task (``Task.answers``). At the door an
answer is also refused while another accepted answer to the same question waits to be
applied; the door's check and its write are one unfenced commit, so of two racing
answers the second finds the first and is told so. The kernel applies answers in log
order: the first wins, every later one is answered as refused.

A deadline that denies (``on_deadline`` ``deny``) closes its question to answers: one
judged at or after it is refused (``QuestionExpired``), and so is every answer once the
deadline's denial is on record. The door judges at the store's time, which it stamps on
the answer it writes (``AnswerBody.accepted_at``, read again on every rebuild after a
lost race); the kernel judges an answer at that stamp — accepted before the deadline, it
counts however late it is applied — and one without a stamp at the time it applies it.
Between an answer and the deadline's denial the log's order decides: the door's check and
write are one commit, so an answer lands before the denial (and counts) or after it (and
is refused). An escalating deadline closes nothing: the question stays open, asked of
``escalate_to``, and a late answer counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import ValidationError

from contracts import (
    AlreadyAnswered,
    Answer,
    AnswerBody,
    AnswerInput,
    BrainhandsError,
    Commit,
    InvalidInput,
    NotFound,
    QuestionClosed,
    QuestionExpired,
    Submission,
    SubmissionStatus,
    Task,
)
from contracts.question import BY_DEADLINE, OnDeadline, Question
from session_store.state import SessionState


def asker(tasks: Iterable[Task], question_id: str) -> Task | None:
    """The task that asks (or asked, and settled) ``question_id``."""
    for task in tasks:
        asked = task.wait.question if task.wait is not None else None
        if question_id in task.answers or (asked is not None and asked.id == question_id):
            return task
    return None


def judge(tasks: Iterable[Task], body: AnswerBody, at: datetime) -> BrainhandsError | None:
    """Why ``body``, given at ``at`` (the store's time), cannot be applied (None: it can)."""
    question_id = body.question_id
    task = asker(tasks, question_id)
    if task is None:
        return NotFound(
            f"no open question {question_id!r} in this session", question_id=question_id
        )
    settled = task.answers.get(question_id)
    if settled is not None:
        return _settled(task, settled)
    if task.is_terminal or task.cancel_requested:
        return QuestionClosed(
            f"question {question_id!r} is closed: its task {task.id} is ending",
            question_id=question_id,
            task_id=task.id,
        )
    question = task.question
    assert question is not None
    deadline = _closing_deadline(question)
    if deadline is not None and deadline <= at:
        return _expired(task, question_id, deadline, settled=False)
    problem = question.problem(body.value)
    if problem is not None:
        return InvalidInput(f"answer to {question.id!r}: {problem}", field="value")
    return None


def _settled(task: Task, settled: Answer) -> BrainhandsError:
    """Why an answer to a question that is settled already is refused."""
    question_id = settled.question_id
    if settled.closed:
        return QuestionClosed(
            f"question {question_id!r} was closed unanswered: {settled.why}",
            question_id=question_id,
            task_id=task.id,
        )
    if settled.by == BY_DEADLINE and settled.request_id is None:
        return _expired(task, question_id, settled.answered_at, settled=True)
    return AlreadyAnswered(
        f"question {question_id!r} was already answered by {settled.by}",
        question_id=question_id,
        by=settled.by,
        request_id=settled.request_id,
    )


def _closing_deadline(question: Question) -> datetime | None:
    """The deadline after which no answer counts (an escalating one asks again instead)."""
    return question.deadline if question.on_deadline is OnDeadline.DENY else None


def _expired(task: Task, question_id: str, deadline: datetime, *, settled: bool) -> QuestionExpired:
    said = "was denied by its deadline" if settled else "is past its deadline"
    return QuestionExpired(
        f"question {question_id!r} {said} {deadline.isoformat()}: an answer after it "
        "does not count",
        question_id=question_id,
        task_id=task.id,
        deadline=deadline.isoformat(),
        settled=settled,
    )


def answer_body(
    question_id: str, value: object, by: str, why: str | None, *, claimed_by: str | None = None
) -> AnswerBody:
    """The answer's body, or ``InvalidInput`` naming the field that is wrong."""
    given = {"question_id": question_id, "value": value, "by": by, "why": why}
    try:
        return AnswerBody.model_validate({**given, "claimed_by": claimed_by})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{where}: {first['msg']}", field=where) from None


def answer_commit(
    state: SessionState, request_id: str, body: AnswerBody, at: datetime
) -> Commit | None:
    """The door's commit for an answer given at ``at`` (the store's time, stamped on it):
    None when this request id is in already (a racing repeat); raises why the answer
    cannot be accepted."""
    if request_id in state.submissions:
        return None
    pending = _pending(state, body.question_id)
    if pending is not None:
        raise AlreadyAnswered(
            f"question {body.question_id!r} already has an accepted answer "
            f"({pending.request_id}), not applied yet",
            question_id=body.question_id,
            request_id=pending.request_id,
        )
    stamped = body.model_copy(update={"accepted_at": at})
    refused = judge(state.tasks.values(), stamped, at)
    if refused is not None:
        raise refused
    submission = Submission(
        request_id=request_id, input=AnswerInput(answer=stamped).model_dump(mode="json")
    )
    return Commit(submissions=(submission,))


def answer_of(submission: Submission) -> AnswerBody | None:
    """The answer a submission carries (None: it carries work, or is malformed)."""
    given = submission.input
    if not isinstance(given, dict) or "answer" not in given:
        return None
    try:
        return AnswerInput.model_validate(given).answer
    except ValidationError:
        return None


def _pending(state: SessionState, question_id: str) -> Submission | None:
    for submission in state.submissions.values():
        if submission.status is not SubmissionStatus.ACCEPTED:
            continue
        body = answer_of(submission)
        if body is not None and body.question_id == question_id:
            return submission
    return None
