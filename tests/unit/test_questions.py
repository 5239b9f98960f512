"""Questions a task asks a person: the wait holds no Brain, an answer is checked at the
door, accepted once per request id, applied exactly once (the first accepted answer
wins), and a deadline answers or escalates. Crashes around them: tests/chaos."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, Wait
from brain.registry import Registry
from contracts import (
    Commit,
    InvalidInput,
    NotFound,
    Submission,
    SubmissionStatus,
    TaskStatus,
)
from contracts.errors import AlreadyAnswered, QuestionClosed
from contracts.question import (
    BY_DEADLINE,
    DENY,
    ApprovalRule,
    OnDeadline,
    PendingCall,
    Question,
    QuestionKind,
)
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.kernel import Kernel, kernel
from tests.support.kernel import kind as kind_

ASKED = Question(id="q1", prompt="Which colour?", kind=QuestionKind.CHOICE, choices=("red", "blue"))


def asking(question: Question = ASKED) -> Registry:
    """``ask``: asks ``question``, then answers its submission with what it was told."""

    async def start(ctx: PhaseContext) -> Wait:
        return Wait(question=question, next_phase="told")

    async def told(ctx: PhaseContext) -> Done:
        answer = ctx.answer(question.id)
        return Done(result={"value": answer.value, "by": answer.by})

    registry = Registry()
    registry.add(kind_("ask", {"start": start, "told": told}))
    return registry


async def asked(k: Kernel) -> int:
    """Submit an ``ask`` task and drive it to its question; the session's seq."""
    await k.submit_task("ask")
    report = await k.run()
    assert report.active, "waiting for input is open work"
    return (await k.store.session("s1")).seq


async def test_a_question_waits_without_writing_and_the_answer_continues_the_task(
    tmp_path: Path,
) -> None:
    async with kernel(tmp_path, asking()) as k:
        seq = await asked(k)
        task = await k.task("root.r1")
        assert task.status is TaskStatus.WAITING
        assert task.wait is not None and task.wait.question == ASKED
        await k.run()
        assert (await k.store.session("s1")).seq == seq, "a drive with nothing to do writes nothing"

        accepted = await k.client.answer("s1", "a1", "q1", "blue", by="ann")
        assert accepted.status is SubmissionStatus.ACCEPTED
        await k.run()
        assert (await k.submission()).answer == {"value": "blue", "by": "ann"}
        applied = await k.submission("a1")
        assert applied.status is SubmissionStatus.ANSWERED
        assert applied.answer == {"question_id": "q1", "task_id": "root.r1", "applied": True}
        root = await k.task("root.r1")
        assert root.answers["q1"].request_id == "a1" and root.answers["q1"].by == "ann"


async def test_the_same_request_id_is_the_same_answer(tmp_path: Path) -> None:
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        first = await k.client.answer("s1", "a1", "q1", "blue", by="ann")
        seq = (await k.store.session("s1")).seq
        again = await k.client.answer("s1", "a1", "q1", "red", by="bob")
        assert again == first and (await k.store.session("s1")).seq == seq
        await k.run()
        assert (await k.submission()).answer == {"value": "blue", "by": "ann"}
        settled = await k.client.answer("s1", "a1", "q1", "red", by="bob")
        assert settled.status is SubmissionStatus.ANSWERED, "a repeat after it applied, too"


async def test_a_second_answer_is_refused_before_and_after_the_first_is_applied(
    tmp_path: Path,
) -> None:
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        await k.client.answer("s1", "a1", "q1", "blue", by="ann")
        with pytest.raises(AlreadyAnswered) as pending:
            await k.client.answer("s1", "a2", "q1", "red", by="bob")
        assert pending.value.details["request_id"] == "a1"
        await k.run()
        with pytest.raises(AlreadyAnswered) as applied:
            await k.client.answer("s1", "a3", "q1", "red", by="bob")
        assert applied.value.details["by"] == "ann"
        assert (await k.submission()).answer == {"value": "blue", "by": "ann"}


async def test_racing_answers_from_two_writers_leave_one_winner(tmp_path: Path) -> None:
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        url = f"sqlite:///{tmp_path}/kernel.db"
        stores = [await open_store(url) for _ in range(2)]
        try:
            clients = [SessionClient(store) for store in stores]
            await asyncio.gather(*(store.session("s1") for store in stores))  # both loaded
            results = await asyncio.gather(
                clients[0].answer("s1", "a1", "q1", "blue", by="ann"),
                clients[1].answer("s1", "a2", "q1", "red", by="bob"),
                return_exceptions=True,
            )
        finally:
            for store in stores:
                await store.close()
        won = [r for r in results if isinstance(r, Submission)]
        lost = [r for r in results if isinstance(r, AlreadyAnswered)]
        assert len(won) == 1 and len(lost) == 1, results
        await k.run()
        value = "blue" if won[0].request_id == "a1" else "red"
        assert (await k.submission()).answer["value"] == value  # type: ignore[index]


async def test_the_kernel_applies_only_the_first_of_two_stored_answers(tmp_path: Path) -> None:
    # An ingress that does not check (an older API, a bug) lets two answers through:
    # the log's order decides, and the second is answered as refused.
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        handle = await k.store.session("s1")
        for request_id, value in (("a1", "blue"), ("a2", "red")):
            body = {"question_id": "q1", "value": value, "by": request_id}
            sub = Submission(request_id=request_id, input={"answer": body})
            await handle.commit(Commit(submissions=(sub,)), fence=None)
        await k.run()
        assert (await k.submission()).answer == {"value": "blue", "by": "a1"}
        second = await k.submission("a2")
        assert second.status is SubmissionStatus.FAILED
        assert second.error is not None and second.error.code == "already_answered"


@pytest.mark.parametrize(
    ("question", "value", "problem"),
    [
        (ASKED, "green", "one of ['red', 'blue']"),
        (Question(id="q1", prompt="Name?"), "", "non-empty string"),
        (
            Question(
                id="q1",
                prompt="How many?",
                kind=QuestionKind.JSON,
                answer_schema={"type": "integer", "minimum": 1},
            ),
            0,
            "minimum",
        ),
    ],
)
async def test_an_answer_that_does_not_fit_is_refused_and_nothing_is_stored(
    tmp_path: Path, question: Question, value: object, problem: str
) -> None:
    async with kernel(tmp_path, asking(question)) as k:
        seq = await asked(k)
        with pytest.raises(InvalidInput) as refused:
            await k.client.answer("s1", "a1", "q1", value, by="ann")  # type: ignore[arg-type]
        assert problem in refused.value.message and refused.value.details["field"] == "value"
        assert (await k.store.session("s1")).seq == seq


async def test_unknown_and_closed_questions_are_refused(tmp_path: Path) -> None:
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        with pytest.raises(NotFound):
            await k.client.answer("s1", "a1", "q2", "blue", by="ann")
        await k.client.cancel("s1", task_id="root.r1", reason="operator")
        await k.run()
        assert (await k.task("root.r1")).status is TaskStatus.TERMINAL
        with pytest.raises(QuestionClosed):
            await k.client.answer("s1", "a1", "q1", "blue", by="ann")


async def test_a_plain_submission_cannot_carry_an_answer(tmp_path: Path) -> None:
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        with pytest.raises(InvalidInput):
            await k.client.submit("s1", "a1", {"answer": {"question_id": "q1", "value": "x"}})


def approval(**options: object) -> Question:
    call = PendingCall(tool="send", arguments={"to": "a@example.com"}, operation_id="op1")
    return Question(
        id="q1",
        prompt="Send it?",
        kind=QuestionKind.APPROVAL,
        call=call,
        deadline=options.pop("deadline", None),  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


async def test_a_deadline_denies_an_unanswered_approval(tmp_path: Path) -> None:
    async with kernel(tmp_path) as k:
        asked_at = k.runner().services.clock()
        k.registry = asking(approval(deadline=asked_at + timedelta(milliseconds=300)))
        await k.submit_task("ask")
        report = await k.run()  # sleeps until the deadline, the durable timer's wake
        assert not report.active
        assert (await k.submission()).answer == {"value": DENY, "by": BY_DEADLINE}
        settled = (await k.task("root.r1")).answers["q1"]
        assert settled.request_id is None and "deadline" in (settled.why or "")


async def test_a_deadline_can_escalate_to_another_queue(tmp_path: Path) -> None:
    async with kernel(tmp_path) as k:
        asked_at = k.runner().services.clock()
        question = approval(
            deadline=asked_at + timedelta(milliseconds=300),
            on_deadline=OnDeadline.ESCALATE,
            escalate_to="leads",
            queue="team",
        )
        k.registry = asking(question)
        await k.submit_task("ask")
        report = await k.run()
        assert report.active and report.next_wake_at is None, "asked again, no deadline"
        task = await k.task("root.r1")
        assert task.status is TaskStatus.WAITING and task.wait is not None
        escalated = task.wait.question
        assert escalated is not None
        assert (escalated.queue, escalated.deadline) == ("leads", None)
        await k.client.answer("s1", "a1", "q1", "approve", by="lead")
        await k.run()
        assert (await k.submission()).answer == {"value": "approve", "by": "lead"}


def test_an_image_label_declares_that_calls_need_approval() -> None:
    from hands.labels import ToolCaps, definition_from_labels

    p = "io.brainhands.tool."
    base = {p + "name": "send", p + "version": "1", p + "schema": '{"type":"object"}'}
    base |= {p + "replay": "unsafe", p + "timeout": "10"}

    def declared(value: str) -> object:
        labels = {**base, p + "approval": value}
        return definition_from_labels("img", "sha256:0", labels, caps=ToolCaps()).approval

    assert declared("required") == ApprovalRule(tool="*")
    rule = declared('{"queue": "ops", "within_s": 60}')
    assert rule == ApprovalRule(tool="*", queue="ops", within_s=60)
    for bad in ('{"within_s": -1}', "[1]", '{"on_deadline": "escalate"}'):
        with pytest.raises(InvalidInput) as refused:
            declared(bad)
        assert refused.value.details["label"] == p + "approval"


def test_an_approval_rule_can_pick_calls_by_their_arguments() -> None:
    rule = ApprovalRule.parse(
        '{"tool": "pay", "when": {"properties": {"amount": {"minimum": 100}}}}'
    )
    assert rule.applies("pay", {"amount": 500}) and not rule.applies("pay", {"amount": 5})
    assert not rule.applies("refund", {"amount": 500})
    assert ApprovalRule.parse("pay").applies("pay", {}) and ApprovalRule.parse("*").applies("x", {})
