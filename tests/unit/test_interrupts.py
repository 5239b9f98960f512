"""A new message with policy ``interrupt`` abandons a model call in flight, and nothing
else: an answer that arrived is committed with its usage, and a drive stopped later is
not mistaken for an interruption."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from brain.agent import agent_kinds
from brain.context import PhaseContext
from brain.model.messages import ChatMessage, ModelReply, ToolSchema
from brain.outcome import Next
from brain.registry import Registry
from contracts import EntryKind, Handling, SubmissionStatus, TaskStatus, Usage
from coordination.ratelimit import Admission
from tests.support.eventually import assert_eventually
from tests.support.kernel import Kernel, kernel, kind


class Answers:
    """A model stand-in answering each call with the next of ``answers``."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSchema] = (),
        request_id: str,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        self.calls += 1
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return ModelReply(content=self.answers.pop(0), model="m", usage=usage)

    def estimate(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Usage:
        return Usage(calls=1, input_tokens=10, output_tokens=5)

    async def aclose(self) -> None:
        pass


class HeldCharge:
    """Rate limits whose settling after the call waits until ``release`` is set."""

    def __init__(self) -> None:
        self.charging = asyncio.Event()
        self.release = asyncio.Event()

    async def admit(self, tokens: int) -> Admission:
        return Admission(wait=0, window=1, reserved=tokens)

    async def settle(self, admission: Admission, tokens: int) -> None:
        self.charging.set()
        await self.release.wait()


async def handling(k: Kernel, request_id: str) -> Handling | None:
    return (await k.submission(request_id)).handling


async def test_an_interrupt_after_the_model_answered_keeps_the_answer_and_its_usage(
    tmp_path: Path,
) -> None:
    registry = Registry()
    for agent in agent_kinds():
        registry.add(agent)
    async with kernel(tmp_path, registry) as k:
        model, limits = Answers("first answer", "second answer"), HeldCharge()
        await k.client.submit("s1", "r1", "hello")
        drive = asyncio.create_task(k.run(model=model, limits=limits))
        await asyncio.wait_for(limits.charging.wait(), 10)  # answered, not yet committed
        await k.client.submit("s1", "r2", {"text": "stop", "policy": "interrupt"})

        async def interrupted() -> bool:
            return await handling(k, "r2") is Handling.INTERRUPTED

        await assert_eventually(interrupted)
        limits.release.set()
        assert not (await asyncio.wait_for(drive, 10)).active
        session = await k.store.session("s1")
        entries = await session.entries()
    subs = session.state.submissions
    assert subs["r1"].answer == "first answer", "the answer that arrived is kept"
    assert subs["r2"].answer == "second answer", "the message got a turn of its own"
    assert not [e for e in entries if e.kind is EntryKind.INTERRUPTION]
    responses = [e for e in entries if e.kind is EntryKind.MODEL_RESPONSE]
    assert len(responses) == model.calls == 2
    assert session.state.tasks["root.r1"].usage.calls == 1


async def test_a_drive_stopped_after_an_ignored_interrupt_commits_nothing_more(
    tmp_path: Path,
) -> None:
    # The interrupt reaches a phase that is past its model call; the task goes on to a
    # phase that runs until the drive is stopped. Stopping it must not be taken for
    # the earlier interrupt (which would commit an outcome after the stop).
    in_first, past_call, in_second = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def first(ctx: PhaseContext) -> Next:
        in_first.set()
        with contextlib.suppress(asyncio.CancelledError):  # the call had answered: go on
            await past_call.wait()
        return Next(phase="second")

    async def second(ctx: PhaseContext) -> Next:
        in_second.set()
        await asyncio.sleep(3600)
        return Next(phase="first")

    registry = Registry()
    phases: dict[str, Any] = {"start": first, "first": first, "second": second}
    registry.add(kind("agent", phases, interruptible={"start": "second", "second": "first"}))
    async with kernel(tmp_path, registry) as k:
        await k.client.submit("s1", "r1", "hello")
        drive = asyncio.create_task(k.run())
        await asyncio.wait_for(in_first.wait(), 10)
        await k.client.submit("s1", "r2", {"text": "stop", "policy": "interrupt"})

        async def interrupted() -> bool:
            return await handling(k, "r2") is Handling.INTERRUPTED

        await assert_eventually(interrupted)
        past_call.set()
        await asyncio.wait_for(in_second.wait(), 10)
        seq = (await k.store.session("s1")).seq
        drive.cancel()
        await asyncio.gather(drive, return_exceptions=True)
        session = await k.store.session("s1")
    task = session.state.tasks["root.r1"]
    assert (task.phase, task.status) == ("second", TaskStatus.RUNNING)
    assert session.seq == seq, "nothing was committed after the drive was stopped"
    assert session.state.submissions["r1"].status is SubmissionStatus.PROCESSING
