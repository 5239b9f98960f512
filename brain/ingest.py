"""Turning what clients wrote into decisions: new submissions become root tasks,
answers settle the questions of waiting tasks (in log order: the first wins, later ones
are answered as refused; one given after a deadline that denies never counts), and
cancellation requests in the control document become cancel decisions.

A submission the kernel cannot turn into a task (input an older or foreign ingress let
through, a root task id that is taken) is answered as failed with the reason, in the
same commit; the session's other work goes on.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from brain import decide
from brain.builder import CommitBuilder
from brain.outcome import TaskSpec
from contracts import (
    CONTROL_DOCUMENT,
    Answer,
    BrainhandsError,
    ErrorInfo,
    Handling,
    InputPolicy,
    Submission,
    SubmissionStatus,
    TaskInput,
    TextInput,
)
from session_store.intake import read_work
from session_store.questions import answer_of, asker, judge
from session_store.submissions import input_policy, running_message


def root_task_id(request_id: str) -> str:
    return f"root.{request_id}"


def ingest(b: CommitBuilder, *, root_kind: str, refused: Mapping[str, ErrorInfo]) -> None:
    """Record the decisions for new submissions and cancellation requests in ``b``.

    ``refused`` holds submissions whose root task the store refused in an earlier
    attempt of this commit; they are answered as failed.
    """
    control = b.document(CONTROL_DOCUMENT)
    cancel_requests = dict(control.body.get("cancel_requests", {})) if control else {}
    cancel_tasks = dict(control.body.get("cancel_tasks", {})) if control else {}
    for submission in b.submissions():
        reason = cancel_requests.get(submission.request_id)
        if submission.status is SubmissionStatus.ACCEPTED and answer_of(submission):
            _apply_answer(b, submission)
        elif submission.status is SubmissionStatus.ACCEPTED and submission.task_id is None:
            _accept(b, submission, reason, root_kind, refused.get(submission.request_id))
        elif reason is not None and submission.task_id is not None:
            if submission.task_id != root_task_id(submission.request_id):
                # it joined another message's agent: only this message is cancelled
                if not submission.status.is_final:
                    b.update_submission(submission.request_id, status=SubmissionStatus.CANCELLED)
                continue
            cancel_tasks.setdefault(submission.task_id, reason)
    for task_id, reason in cancel_tasks.items():
        task = b.tasks_by_id().get(task_id)
        if task is not None and not task.is_terminal and not task.cancel_requested:
            decide.request_cancel(b, task_id, str(reason or "cancelled"))


def _apply_answer(b: CommitBuilder, submission: Submission) -> None:
    """Settle the question with this answer and answer the submission, in one commit;
    or answer the submission as refused, saying why."""
    body = answer_of(submission)
    assert body is not None
    # Judged when the door accepted it (the store's time it stamped): an answer given
    # before the deadline counts however late a Brain applies it. One without a stamp
    # (an older door, a direct write) is judged now, which can only refuse more.
    refused = judge(b.tasks(), body, body.accepted_at or b.now)
    if refused is not None:
        b.update_submission(
            submission.request_id, status=SubmissionStatus.FAILED, error=refused.info()
        )
        return
    task = asker(b.tasks(), body.question_id)
    assert task is not None
    answer = Answer(
        question_id=body.question_id,
        value=body.value,
        by=body.by,
        claimed_by=body.claimed_by,
        why=body.why,
        request_id=submission.request_id,
    )
    decide.settle_question(b, task.id, answer)
    b.update_submission(
        submission.request_id,
        status=SubmissionStatus.ANSWERED,
        answer={"question_id": body.question_id, "task_id": task.id, "applied": True},
    )


def _accept(
    b: CommitBuilder,
    submission: Submission,
    cancelled: object,
    root_kind: str,
    refused: ErrorInfo | None,
) -> None:
    request_id = submission.request_id
    if cancelled is not None:
        b.update_submission(request_id, status=SubmissionStatus.CANCELLED)
        return
    if _joins_running(b, submission):
        return
    try:
        spec = _root_spec(submission, root_kind)
    except BrainhandsError as error:
        refused = error.info()
    else:
        if refused is None and spec.id in b.tasks_by_id():
            refused = ErrorInfo(code="already_exists", message=f"task {spec.id} already exists")
    if refused is not None:
        b.update_submission(
            request_id,
            status=SubmissionStatus.FAILED,
            error=ErrorInfo(
                code=refused.code,
                message=f"submission {request_id} cannot become a task: {refused.message}",
            ),
        )
        return
    root = b.create(spec, parent_id=None, owner_id=request_id)
    b.update_submission(
        request_id,
        status=SubmissionStatus.PROCESSING,
        task_id=root.id,
        handling=Handling.STARTED,
    )


def _joins_running(b: CommitBuilder, submission: Submission) -> bool:
    """A message for a conversation whose agent is still at work joins that agent (its
    entry is in the conversation already: the agent's next model call sees it), or
    abandons its running model call first, or is refused, as its policy says."""
    try:
        given = read_work(submission.input)
    except BrainhandsError:
        return False  # answered as failed by the caller
    if isinstance(given, TaskInput):
        return False
    state = b.state_view()
    running = running_message(state, submission.conversation_id, besides=submission.request_id)
    task = b.tasks_by_id().get(running.task_id or "") if running is not None else None
    if task is None or task.is_terminal or task.cancel_requested:
        return False
    policy = input_policy(state, given)
    request_id = submission.request_id
    if policy is InputPolicy.REJECT:
        b.update_submission(
            request_id,
            status=SubmissionStatus.FAILED,
            handling=Handling.REJECTED,
            error=ErrorInfo(
                code="busy",
                message=f"refused: task {task.id} is still answering an earlier message "
                f"in conversation {submission.conversation_id} (policy reject)",
            ),
        )
        return True
    handling = Handling.INTERRUPTED if policy is InputPolicy.INTERRUPT else Handling.ENQUEUED
    b.update_submission(
        request_id, status=SubmissionStatus.PROCESSING, task_id=task.id, handling=handling
    )
    if handling is Handling.INTERRUPTED:
        b.interrupts.add(task.id)
    return True


def _root_spec(submission: Submission, root_kind: str) -> TaskSpec:
    given = read_work(submission.input)
    task_id = root_task_id(submission.request_id)
    if isinstance(given, TaskInput):
        requested = given.task
        return TaskSpec(
            id=task_id, kind=requested.kind, version=requested.version, input=requested.input
        )
    text = given.text if isinstance(given, TextInput) else given
    fields: dict[str, JsonValue] = {"conversation_id": submission.conversation_id, "text": text}
    if isinstance(given, TextInput) and given.model is not None:
        fields["model"] = given.model  # routing: only a Brain with this model drives it
    if isinstance(given, TextInput) and given.budget is not None:
        fields["budget"] = given.budget.model_dump(mode="json", exclude_none=True)
    return TaskSpec(id=task_id, kind=root_kind, input=fields)
