"""A fork's inherited calls (issue 31, suspicions settled by test): the original's
cancellation does not answer them, a fork never cancels what it inherited, a call whose
original intent is gone still runs for the fork, and its result wakes the fork."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brain.context import PhaseContext
from brain.operations import operation_id
from brain.outcome import Done, Effects
from brain.registry import Registry
from contracts import ReplayPolicy, TaskStatus
from contracts.tool import ResultEvent, ToolDefinition
from hands.executor import Executor
from hands.sandbox.process import ProcessSandbox
from lifecycle.cancellation import CancelTarget, record_cancel
from tests.support.kernel import Kernel, kernel, kind

ACT = "import json, os; print(json.dumps({'op': os.environ['BH_OPERATION_ID']}))"
WORK = ToolDefinition(
    name="work",
    version=1,
    parameters={"type": "object"},
    replay=ReplayPolicy.UNSAFE,
    timeout_s=20,
    command=(sys.executable, "-c", ACT),
    image="test/work",
    image_id="sha256:work",
)
TASK = "root.r1"


def registry() -> Registry:
    async def start(ctx: PhaseContext) -> Done:
        done = await ctx.operation("work", {"n": 1}, "k")
        return Done(result=done.output, effects=Effects(applied_operations=(done.operation_id,)))

    found = Registry()
    found.add(kind("call", {"start": start}))
    return found


@pytest.fixture
async def forked(tmp_path: Path) -> AsyncIterator[tuple[Kernel, str]]:
    """Session s1 dispatched ``work`` (its intent committed, not run yet), and f1 was
    forked right after: both wait on s1's operation."""
    async with kernel(tmp_path, registry()) as k:
        k.tools.add_sandboxed(WORK)
        await k.store.tools.register(WORK)
        await k.submit_task("call")
        await k.run("s1")
        handle = await k.store.session("s1")
        inherited = operation_id("s1", TASK, "k")
        assert inherited in handle.state.intents
        await k.store.fork("s1", at=handle.state.seq, into="f1")
        yield k, inherited


async def test_the_originals_cancellation_before_the_call_ran_is_no_answer_to_the_fork(
    forked: tuple[Kernel, str],
) -> None:
    """s1 is cancelled before its call ran: the cancellation writes the call's result,
    "cancelled", on the operation both sessions wait on. That is s1's answer, not f1's:
    f1 makes the call as its own (before: f1's call failed as cancelled)."""
    k, inherited = forked
    await k.client.cancel("s1", task_id=TASK, reason="operator")
    await k.run("s1")
    target = CancelTarget(session_id="s1", task_id=TASK, tool="work")
    await record_cancel(k.store, inherited, "its task was cancelled", by="relay", target=target)
    await k.run("f1")
    fork = (await k.store.session("f1")).state
    own = operation_id("f1", TASK, "k")
    task = fork.tasks[TASK]
    assert task.status is TaskStatus.WAITING, task
    assert task.wait is not None and task.wait.operations == (own,)
    assert set(fork.intents) == {own}, "the inherited intent was let go"
    assert fork.intents[own].dispatch.session_id == "f1"


async def test_a_cancelled_fork_does_not_cancel_the_call_it_inherited(
    forked: tuple[Kernel, str],
) -> None:
    """Before: cancelling f1 put a cancellation of s1's operation in f1's outbox, and the
    Hands stopped the original's running call."""
    k, inherited = forked
    await k.run("f1")
    await k.client.cancel("f1", task_id=TASK, reason="operator")
    await k.run("f1")
    fork = await k.store.session("f1")
    assert fork.state.tasks[TASK].status is TaskStatus.TERMINAL
    messages = [m.id async for record in k.store.history("f1") for m in record.commit.outbox]
    assert f"{inherited}.cancel" not in messages


async def test_an_inherited_call_whose_original_intent_is_gone_runs_for_the_fork(
    forked: tuple[Kernel, str], tmp_path: Path
) -> None:
    """s1's task ended with nothing recorded of the call (its relay never reached the
    Hands): s1's log no longer holds the intent, f1's does. The dispatch f1's intents
    make (the scheduler re-issues it, ``via`` f1) runs, and its result is announced to
    f1 as well as to s1 (before: refused forever as not committed; and s1's event alone
    left f1 to the attention pass, ~30 s)."""
    k, inherited = forked
    await k.client.cancel("s1", task_id=TASK, reason="operator")
    await k.run("s1")
    assert inherited not in (await k.store.session("s1")).state.intents
    fork = (await k.store.session("f1")).state
    dispatch = fork.intents[inherited].dispatch.model_copy(update={"via": "f1"})
    events: list[ResultEvent] = []

    async def publish(event: ResultEvent) -> None:
        events.append(event)

    hands = Executor(
        store=k.store,
        sandbox=ProcessSandbox(tmp_path / "runs"),
        publish=publish,
        executor_id="hands-a",
    )
    result = await hands.handle(dispatch)
    assert result is not None and result.succeeded, result
    assert sorted(event.session_id for event in events) == ["f1", "s1"]
    await k.run("f1")
    finished = (await k.store.session("f1")).state.tasks[TASK]
    assert finished.status is TaskStatus.TERMINAL and finished.result == {"op": inherited}
