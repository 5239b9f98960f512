"""Operations belong to their session and task, keep their frozen arguments, leave a trace
when cancelled mid-call, and park with a typed record (issue 6, defects 3, 9 and 12)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from brain.agent import agent_kinds
from brain.context import PhaseContext
from brain.embedded import run_until_idle
from brain.operations import OperationInFlight, Operations
from brain.outcome import Done, Retry
from brain.registry import Registry
from brain.services import Services
from brain.tools import LocalDispatcher, QueryAnswer, ToolSpec
from contracts import (
    BrainhandsError,
    Entry,
    EntryKind,
    Operation,
    OperationResult,
    OperationStatus,
    Outcome,
    OutcomeUnknown,
    ReplayPolicy,
    Task,
    TaskStatus,
)
from lifecycle.decision import LifecycleSettings
from runtime.crashpoints import CrashPoints
from session_store import open_store
from tests.support.kernel import Kernel, cancel_during_call, kernel, kind, mail_kind

ECHO = ToolSpec(name="echo", replay=ReplayPolicy.SAFE)


async def echo(args: dict[str, Any], operation_id: str) -> Any:
    return {"echo": args.get("text"), "operation_id": operation_id}


def with_agent_kinds(registry: Registry | None = None) -> Registry:
    registry = registry or Registry()
    for agent_kind in agent_kinds():
        registry.add(agent_kind)
    return registry


def tool_call(operation_id: str | None = None) -> dict[str, Any]:
    given: dict[str, Any] = {
        "tool": "echo",
        "arguments": json.dumps({"text": "mine"}),
        "call_id": "c1",
        "conversation_id": "main",
    }
    if operation_id is not None:
        given["operation_id"] = operation_id
    return given


async def tool_result_entry(k: Kernel, session_id: str) -> Entry:
    handle = await k.store.session(session_id)
    (found,) = [e for e in await handle.entries() if e.kind is EntryKind.TOOL_RESULT]
    return found


async def test_a_task_never_receives_another_sessions_operation_result(tmp_path: Path) -> None:
    async with kernel(tmp_path, with_agent_kinds()) as k:
        k.tools.register(ECHO, echo)
        await k.submit_task("tool-call", tool_call("a:root.r1"), session_id="a")
        await k.run("a")
        theirs = (await tool_result_entry(k, "a")).operation_id
        assert theirs is not None and await k.store.get_operation_result(theirs) is not None

        # Session b names a's operation id in a client-submitted tool call.
        await k.submit_task("tool-call", tool_call(theirs), session_id="b")
        await k.run("b")
        mine = await k.task("root.r1", "b")
        entry = await tool_result_entry(k, "b")
        assert mine.outcome is Outcome.SUCCEEDED
        assert mine.result["path"] == "executed", "another session's result was reused"  # type: ignore[index]
        assert entry.operation_id != theirs
        assert entry.content["output"]["operation_id"] == entry.operation_id  # type: ignore[index]


async def test_a_result_is_refused_for_an_operation_of_another_session(tmp_path: Path) -> None:
    async with kernel(tmp_path) as k:
        await k.store.create_operation(
            Operation(operation_id="op-a", session_id="a", task_id="t", tool="echo")
        )
        with pytest.raises(BrainhandsError) as refused:
            await k.store.put_operation_result(
                OperationResult(operation_id="op-a", session_id="b", succeeded=True, output=1)
            )
        assert refused.value.code == "operation_mismatch"
        assert "session" in refused.value.message
        assert await k.store.get_operation_result("op-a") is None


async def test_reuse_requires_the_same_frozen_arguments(tmp_path: Path) -> None:
    # A phase that computes different arguments on its second attempt must not be handed
    # the result of the first attempt's call as if it answered the second.
    async def pay(ctx: PhaseContext) -> Done | Retry:
        amount = 10 * ctx.attempt
        await ctx.operation("echo", {"text": f"pay {amount}"}, "payment")
        if ctx.attempt == 1:
            return Retry(reason="the phase failed after its call")
        return Done(result=amount)

    registry = Registry()
    registry.add(kind("pay", {"start": pay}))
    async with kernel(tmp_path, registry) as k:
        k.tools.register(ECHO, echo)
        await k.submit_task("pay")
        await k.run()
        task = await k.task("root.r1")
        assert task.outcome is Outcome.FAILED and task.error is not None
        assert task.error.code == "operation_mismatch"
        assert "arguments" in task.error.message


async def test_cancelling_during_a_call_records_the_operation_and_names_it(tmp_path: Path) -> None:
    registry = Registry()
    registry.add(mail_kind())
    async with kernel(tmp_path, registry) as k:
        await cancel_during_call(k)
        task = await k.task("root.r1")
        (operation,) = await k.store.list_operations("s1")
        assert task.outcome is Outcome.CANCELLED
        assert operation.status is OperationStatus.UNCERTAIN and operation.task_id == "root.r1"
        assert operation.reason is not None and "cancel" in operation.reason
        assert task.reason is not None and operation.operation_id in task.reason


async def test_a_drive_abandoned_during_a_call_leaves_the_operation_to_recovery(
    tmp_path: Path,
) -> None:
    """A Brain that loses its lease drops the drive mid-call (the task was not
    cancelled): like a crash, nothing is decided for the operation. The next holder
    recovers it by the tool's policy — here it verifies the send by operation id and
    finds it — instead of finding it parked as uncertain for an operator."""
    sent: list[str] = []
    inside = asyncio.Event()

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        sent.append(operation_id)  # accepted by the provider, the answer never comes back
        inside.set()
        await asyncio.sleep(3600)

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        return QueryAnswer(found=operation_id in sent, output={"id": operation_id})

    registry = Registry()
    registry.add(mail_kind())
    async with kernel(tmp_path, registry) as k:
        # brain-1 runs in this very process, so brain-2 cannot know its attempt ended:
        # it waits for the attempt's deadline (the tool's timeout) before verifying
        spec = ToolSpec(name="send", replay=ReplayPolicy.UNSAFE, timeout=timedelta(seconds=2))
        k.tools.register(spec, send, query=query)
        await k.submit_task("mail")
        first = asyncio.create_task(k.runner("brain-1").drive("s1", fence=1))
        await asyncio.wait_for(inside.wait(), 10)
        first.cancel()  # what BrainService does when the lease is lost
        with contextlib.suppress(asyncio.CancelledError):
            await first
        (operation,) = await k.store.list_operations("s1")
        assert operation.status is OperationStatus.RUNNING, operation.reason
        await run_until_idle(k.runner("brain-2"), "s1")
        task = await k.task("root.r1")
        assert task.outcome is Outcome.SUCCEEDED, task
        assert sent == [operation.operation_id]  # verified, not sent again


async def test_a_parked_task_says_so_in_a_typed_field(tmp_path: Path) -> None:
    async def lost(args: dict[str, Any], operation_id: str) -> Any:
        raise OutcomeUnknown("the reply was lost", operation_id=operation_id)

    async def start(ctx: PhaseContext) -> Done:
        resolution = await ctx.operation("charge", {"cents": 500}, "charge")
        return Done(result=resolution.output)

    registry = Registry()
    registry.add(kind("charge", {"start": start}))
    async with kernel(tmp_path, registry) as k:
        k.tools.register(ToolSpec(name="charge"), lost)
        await k.submit_task("charge")
        report = await k.run()
        task = await k.task("root.r1")
        assert task.status is TaskStatus.WAITING and task.parked is not None
        assert report.parked == {"root.r1": task.parked.reason}
        operation = await k.store.get_operation(task.parked.operation_id)
        assert operation is not None and operation.status is OperationStatus.UNCERTAIN


async def test_an_applied_operation_is_known_as_applied(tmp_path: Path) -> None:
    async with kernel(tmp_path, with_agent_kinds()) as k:
        k.tools.register(ECHO, echo)
        await k.submit_task("tool-call", tool_call())
        await k.run()
        operation_id = (await k.task("root.r1")).result["operation_id"]  # type: ignore[index]
        handle = await k.store.session("s1")
        assert await handle.is_applied(operation_id)
        assert "applied" not in {status.value for status in OperationStatus}, (
            "applied is a fact of the session's log, not a status the record never reaches"
        )


async def test_an_outcome_that_stays_unknown_is_retried_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    calls: list[str] = []

    async def flaky(args: dict[str, Any], operation_id: str) -> Any:
        calls.append(operation_id)
        raise OutcomeUnknown("the reply was lost again", operation_id=operation_id)

    async def start(ctx: PhaseContext) -> Done:
        await ctx.operation("ping", {}, "ping")
        return Done(result="answered")

    registry = Registry()
    registry.add(kind("ping", {"start": start}, max_attempts=3))
    async with kernel(tmp_path, registry) as k:
        k.tools.register(ToolSpec(name="ping", replay=ReplayPolicy.SAFE), flaky)
        await k.submit_task("ping")
        await asyncio.wait_for(k.run(), 20)
        task = await k.task("root.r1")
        # the lifecycle's attempt limit (3, shared with the Hands): then an operator
        # decides, and the task waits on the parked operation
        assert len(calls) == LifecycleSettings().max_attempts
        (operation,) = await k.store.list_operations("s1")
        assert operation.attempts == 3 and operation.status is OperationStatus.UNCERTAIN
        assert "3 attempts made" in (operation.reason or "")
        assert task.status is TaskStatus.WAITING and task.wait is not None
        assert task.parked is not None


async def test_a_query_that_does_not_answer_is_asked_again_not_a_failed_task(
    tmp_path: Path,
) -> None:
    """Verifying an unsafe call whose reply was lost: the query itself gets no answer
    once (a dropped connection). That is no outcome: the phase is retried and asks
    again; it does not fail the task (the compose deployment failed a five-emails
    subtask this way) and never sends a second time."""
    sent: list[str] = []
    queries: list[str] = []

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        sent.append(operation_id)
        raise OutcomeUnknown("the reply was lost", operation_id=operation_id)

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        queries.append(operation_id)
        if len(queries) == 1:
            raise OutcomeUnknown("no answer to the query", operation_id=operation_id)
        return QueryAnswer(found=operation_id in sent, output={"id": operation_id})

    async def start(ctx: PhaseContext) -> Done:
        await ctx.operation("mail", {}, "mail")
        return Done(result="sent")

    registry = Registry()
    registry.add(kind("mail", {"start": start}, max_attempts=3))
    async with kernel(tmp_path, registry) as k:
        k.tools.register(ToolSpec(name="mail", replay=ReplayPolicy.UNSAFE), send, query)
        await k.submit_task("mail")
        await asyncio.wait_for(k.run(), 20)
        task = await k.task("root.r1")
        assert task.outcome is Outcome.SUCCEEDED, task.error
        assert len(sent) == 1 and len(queries) == 2
        assert task.result == "sent"


async def test_a_phase_whose_own_query_gets_no_answer_is_retried_not_failed(
    tmp_path: Path,
) -> None:
    """The five-emails batch confirms each send with the service's query in a phase of
    its own. A query without an answer (a connect timeout on a loaded host: the compose
    deployment's run 12) is no outcome of anything: the phase is retried, the task does
    not fail."""
    queries: list[str] = []

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        return {"sent": operation_id}

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        queries.append(operation_id)
        if len(queries) == 1:
            raise OutcomeUnknown(
                "no answer to the query (ConnectTimeout)", operation_id=operation_id
            )
        return QueryAnswer(found=True, output={"id": operation_id})

    async def confirm(ctx: PhaseContext) -> Done:
        answer = await ctx.services.tools.query("mail", {}, operation_id="op-confirm")
        return Done(result=answer.found)

    registry = Registry()
    registry.add(kind("confirm", {"start": confirm}, max_attempts=3))
    async with kernel(tmp_path, registry) as k:
        k.tools.register(ToolSpec(name="mail", replay=ReplayPolicy.UNSAFE), send, query)
        await k.submit_task("confirm")
        await asyncio.wait_for(k.run(), 20)
        task = await k.task("root.r1")
        assert task.outcome is Outcome.SUCCEEDED, task.error
        assert task.result is True and len(queries) == 2


async def test_an_abandoned_call_is_not_sent_again_while_its_request_may_still_land(
    tmp_path: Path,
) -> None:
    """Issue 31, defect 2: the Brain abandoned an unsafe in-process call at its timeout,
    asked the query at once — the service had the request but had not recorded it yet
    (it answers 0.3 s late) — and sent attempt 2: "the service received 2 sends for one
    operation". A query's "not found" counts only once the attempt's deadline plus the
    takeover margin has passed, for the Brain exactly as for the Hands."""
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    received: list[str] = []
    recorded: set[str] = set()
    landed = asyncio.Event()
    background: set[asyncio.Task[None]] = set()

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        received.append(operation_id)

        async def record() -> None:  # the service goes on after the caller gave up
            await asyncio.sleep(0.3)
            recorded.add(operation_id)
            landed.set()

        background.add(asyncio.create_task(record()))
        await asyncio.Event().wait()  # no answer before the caller's timeout

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        found = operation_id in recorded
        return QueryAnswer(found=found, output={"sent": operation_id} if found else None)

    tools = LocalDispatcher()
    tools.register(ToolSpec(name="send", timeout=timedelta(seconds=0.2)), send, query)
    services = Services(
        store=store, tools=tools, crash=CrashPoints(), clock=store.clock.now, runner_id="brain-a"
    )
    task = Task(id="t1", kind="k", version=1)
    try:
        with pytest.raises(BrainhandsError) as first:
            await Operations(services, "s1", task).perform("send", {"to": "ada"}, "k")
        assert len(received) == 1, "sent again while the first request could still land"
        assert isinstance(first.value, OperationInFlight), first.value
        await asyncio.wait_for(landed.wait(), 5)
        until = first.value.until
        later = dataclasses.replace(services, clock=lambda: until + timedelta(seconds=1))
        performed = await Operations(later, "s1", task).perform("send", {"to": "ada"}, "k")
        assert performed.path == "verified" and performed.output == {"sent": received[0]}
        assert len(received) == 1
    finally:
        await asyncio.gather(*background)
        await store.close()
