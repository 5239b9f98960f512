"""Questions a task asks a person: the wait holds no Brain, an answer is checked at the
door, accepted once per request id, applied exactly once (the first accepted answer
wins), and a deadline answers or escalates; an answer after a deadline that denies never
counts, at the door or in the kernel. Crashes around them: tests/chaos."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

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
from contracts.errors import AlreadyAnswered, QuestionClosed, QuestionExpired
from contracts.question import (
    BY_DEADLINE,
    BY_KERNEL,
    DENY,
    ApprovalRule,
    OnDeadline,
    PendingCall,
    Question,
    QuestionKind,
)
from session_store import open_store
from session_store.questions import answer_body
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import Kernel, kernel
from tests.support.kernel import kind as kind_

T = TypeVar("T")

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


async def asked_until(
    k: Kernel, within: timedelta, *, session_id: str = "s1", **options: object
) -> Question:
    """Ask an approval whose deadline is ``within`` after the store's time now, in one
    drive of a Brain whose clock stands still at that time: no Brain plans after the
    deadline until the test drives one."""
    now = await k.store.clock.fresh()
    question = approval(deadline=now + within, **options)
    k.registry = asking(question)
    await k.submit_task("ask", session_id=session_id)
    report = await k.runner(clock=lambda: now).drive(session_id)
    assert report.active and report.next_wake_at == question.deadline
    return question


def after(question: Question) -> Callable[[], datetime]:
    """The clock of a Brain that comes after the question's deadline (a late wake)."""
    assert question.deadline is not None
    later = question.deadline + timedelta(seconds=1)
    return lambda: later


async def past_deadline(k: Kernel, question: Question) -> None:
    """Until the store's clock is past the question's deadline."""
    deadline = question.deadline
    assert deadline is not None

    async def passed() -> bool:
        return k.store.clock.now() > deadline

    await assert_eventually(passed, interval=0.002)


async def test_a_deadline_denies_an_unanswered_approval(tmp_path: Path) -> None:
    async with kernel(tmp_path) as k:
        question = await asked_until(k, timedelta(hours=1))
        report = await k.runner(clock=after(question)).drive("s1")
        assert not report.active
        assert (await k.submission()).answer == {"value": DENY, "by": BY_DEADLINE}
        settled = (await k.task("root.r1")).answers["q1"]
        assert settled.request_id is None and "deadline" in (settled.why or "")


async def test_a_deadline_can_escalate_to_another_queue(tmp_path: Path) -> None:
    async with kernel(tmp_path) as k:
        question = await asked_until(
            k,
            timedelta(hours=1),
            on_deadline=OnDeadline.ESCALATE,
            escalate_to="leads",
            queue="team",
        )
        report = await k.runner(clock=after(question)).drive("s1")
        assert report.active and report.next_wake_at is None, "asked again, no deadline"
        task = await k.task("root.r1")
        assert task.status is TaskStatus.WAITING and task.wait is not None
        escalated = task.wait.question
        assert escalated is not None
        assert (escalated.queue, escalated.deadline) == ("leads", None)
        await k.client.answer("s1", "a1", "q1", "approve", by="lead")
        await k.run()
        assert (await k.submission()).answer == {"value": "approve", "by": "lead"}


async def test_an_answer_after_the_deadline_is_refused_at_the_door(tmp_path: Path) -> None:
    # No Brain planned since the deadline (busy Brains, a scheduler outage): the question
    # is still open in the log, and the door judges by the store's clock.
    async with kernel(tmp_path) as k:
        question = await asked_until(k, timedelta(milliseconds=5))
        seq = (await k.store.session("s1")).seq
        await past_deadline(k, question)
        with pytest.raises(QuestionExpired) as late:
            await k.client.answer("s1", "a1", "q1", "approve", by="ann")
        assert question.deadline is not None
        assert late.value.details == {
            "question_id": "q1",
            "task_id": "root.r1",
            "deadline": question.deadline.isoformat(),
            "settled": False,
        }
        assert (await k.store.session("s1")).seq == seq, "nothing is stored"
        await k.runner(clock=k.store.clock.now).drive("s1")
        assert (await k.submission()).answer == {"value": DENY, "by": BY_DEADLINE}
        with pytest.raises(QuestionExpired) as denied:
            await k.client.answer("s1", "a2", "q1", "approve", by="ann")
        assert denied.value.details["settled"] is True


@pytest.mark.parametrize("stamped", [False, True])
async def test_the_kernel_refuses_an_answer_that_came_after_the_deadline(
    tmp_path: Path, stamped: bool
) -> None:
    # Answers that got into the log without the door's check (an older API, a direct
    # write): one the door stamped after the deadline never counts, and one without a
    # stamp is judged when it is applied, after the deadline here.
    async with kernel(tmp_path) as k:
        question = await asked_until(k, timedelta(hours=1))
        assert question.deadline is not None
        body: dict[str, object] = {"question_id": "q1", "value": "approve", "by": "ann"}
        if stamped:
            body["accepted_at"] = (question.deadline + timedelta(milliseconds=1)).isoformat()
        handle = await k.store.session("s1")
        late = Submission(request_id="a1", input={"answer": body})
        await handle.commit(Commit(submissions=(late,)), fence=None)
        await k.runner(clock=after(question)).drive("s1")
        refused = await k.submission("a1")
        assert refused.status is SubmissionStatus.FAILED
        assert refused.error is not None and refused.error.code == "question_expired"
        assert (await k.submission()).answer == {"value": DENY, "by": BY_DEADLINE}


async def test_an_answer_accepted_before_the_deadline_counts_when_applied_after_it(
    tmp_path: Path,
) -> None:
    async with kernel(tmp_path) as k:
        question = await asked_until(k, timedelta(hours=1))
        await k.client.answer("s1", "a1", "q1", "approve", by="ann")
        await k.runner(clock=after(question)).drive("s1")  # the Brain came late
        assert (await k.submission()).answer == {"value": "approve", "by": "ann"}
        assert (await k.submission("a1")).status is SubmissionStatus.ANSWERED


async def later(work: Awaitable[T], turns: int) -> T:
    """``work``, after ``turns`` turns of the event loop."""
    for _ in range(turns):
        await asyncio.sleep(0)
    return await work


async def test_an_answer_racing_the_deadline_counts_or_is_told_it_expired(tmp_path: Path) -> None:
    # The door reads the store's time before the deadline while a Brain whose reading is
    # after it records the denial (two processes' readings of the store's clock differ
    # by up to its resolution). The log orders the two commits: the answer is accepted
    # and approves, or it is refused as expired and the deadline denies; never an
    # accepted answer that does not count.
    async with kernel(tmp_path) as k:
        door_store = await open_store(f"sqlite:///{tmp_path}/kernel.db")
        try:
            door = SessionClient(door_store)
            for round_ in range(8):
                session_id = f"race{round_}"
                question = await asked_until(k, timedelta(hours=1), session_id=session_id)
                # each round the answer starts a little later than the Brain's drive,
                # or the drive a little later than the answer
                answer = door.answer(session_id, "a1", "q1", "approve", by="ann")
                drive = k.runner(clock=after(question)).drive(session_id)
                answered, _ = await asyncio.gather(
                    later(answer, round_ % 4 * 3) if round_ < 4 else answer,
                    later(drive, round_ % 4 * 3) if round_ >= 4 else drive,
                    return_exceptions=True,
                )
                await k.runner(clock=after(question)).drive(session_id)
                settled = (await k.task("root.r1", session_id)).answers["q1"]
                if isinstance(answered, Submission):
                    assert (settled.value, settled.request_id) == ("approve", "a1")
                else:
                    assert isinstance(answered, QuestionExpired), answered
                    assert (settled.value, settled.by) == (DENY, BY_DEADLINE)
        finally:
            await door_store.close()


async def test_an_escalating_question_stays_open_past_its_deadline(tmp_path: Path) -> None:
    # Escalation asks again of another queue; it does not close the question, and a
    # queue routes questions, it does not authorise answers: a late answer counts.
    async with kernel(tmp_path) as k:
        question = await asked_until(
            k,
            timedelta(milliseconds=5),
            on_deadline=OnDeadline.ESCALATE,
            escalate_to="leads",
            queue="team",
        )
        await past_deadline(k, question)
        await k.client.answer("s1", "a1", "q1", "approve", by="ann")
        await k.runner(clock=k.store.clock.now).drive("s1")
        assert (await k.submission()).answer == {"value": "approve", "by": "ann"}


async def test_the_answer_records_who_answered_and_the_name_they_gave(tmp_path: Path) -> None:
    async with kernel(tmp_path, asking()) as k:
        await asked(k)
        await k.client.answer("s1", "a1", "q1", "blue", by="ops-bot", claimed_by="ops-lead")
        await k.run()
        settled = (await k.task("root.r1")).answers["q1"]
        assert (settled.by, settled.claimed_by) == ("ops-bot", "ops-lead")


@pytest.mark.parametrize("field", ["by", "claimed_by"])
@pytest.mark.parametrize("name", [BY_DEADLINE, BY_KERNEL])
def test_an_answer_cannot_name_the_deadline_or_the_kernel(field: str, name: str) -> None:
    given = {"by": "ann", field: name}
    with pytest.raises(InvalidInput) as refused:
        answer_body("q1", "blue", given["by"], None, claimed_by=given.get("claimed_by"))
    assert refused.value.details["field"] == field and name in refused.value.message


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
