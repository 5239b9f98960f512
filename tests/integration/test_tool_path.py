"""The Brain lets go: a sandboxed call is one commit (intent + dispatch + wait), the relay
publishes it, the Hands run it once, and its result is applied once — over real NATS."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from brain.context import PhaseContext
from brain.embedded import run_until_idle
from brain.outcome import Done, Effects, PhaseOutcome
from brain.registry import Registry
from brain.results import ResultWaiter
from brain.runner import SessionRunner
from brain.tools import LocalDispatcher
from bus import DISPATCH_STREAM, Bus
from contracts import (
    Operation,
    OperationStatus,
    Outcome,
    ReplayPolicy,
    TaskStatus,
    utcnow,
)
from hands.sandbox.process import ProcessSandbox
from session_store import SessionStore
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.kernel import kind
from tests.support.stores import StoreLocation
from tests.support.toolpath import brain_services, ledger_tool, running_hands, runs, scratch_bus

pytestmark = [pytest.mark.nats]


async def _call(ctx: PhaseContext) -> PhaseOutcome:
    performed = await ctx.operation("act", {"message": ctx.input}, "act")
    return Done(
        result={"output": performed.output, "path": performed.path},
        effects=Effects(applied_operations=(performed.operation_id,)),
    )


async def test_a_sandboxed_call_is_committed_dispatched_run_once_and_applied_once(
    tmp_path: Path, location: StoreLocation
) -> None:
    ledger = tmp_path / "ledger"
    store, tools = await sandboxed_act(location, ledger)
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        await SessionClient(store).submit("s1", "r1", {"task": {"kind": "caller", "input": "hi"}})
        async with ResultWaiter(bus, "s1") as results:
            # First drive: the call becomes an intent; nothing runs it yet.
            first = await runner.drive("s1")
            assert first.active and len(first.awaiting) == 1
            op = first.awaiting[0]
            assert runs(ledger) == []
            async with running_hands(store, ProcessSandbox(tmp_path / "runs"), bus):
                report = await run_until_idle(runner, "s1", results=results)
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.outcome is Outcome.SUCCEEDED
    assert task.result == {"output": {"echo": "hi", "op": op}, "path": "executed"}
    assert not report.active
    assert runs(ledger) == [op]
    records = [record async for record in store.history("s1")]
    intents = [r.commit for r in records if r.commit.outbox]
    assert len(intents) == 1
    (intent,) = intents
    (waiting,) = [t for t in intent.tasks if t.id == "root.r1"]
    assert waiting.status is TaskStatus.WAITING and waiting.wait is not None
    assert waiting.wait.operations == (op,)
    assert intent.outbox[0].id == op and intent.outbox[0].topic == "tools.dispatch.act"
    assert sum(1 for r in records if op in r.commit.outbox_done) == 1
    assert sum(1 for r in records if op in r.commit.applied_operations) == 1


def _slow_caller() -> Registry:
    """``caller``: one sandboxed ``act`` that sleeps 30 s (it is cancelled first)."""

    async def slow(ctx: PhaseContext) -> PhaseOutcome:
        await ctx.operation("act", {"sleep": 30.0}, "act")
        return Done(result="finished")

    registry = Registry()
    registry.add(kind("caller", {"start": slow}))
    return registry


async def test_cancelling_a_task_that_waits_on_the_hands_stops_its_operation(
    tmp_path: Path, location: StoreLocation
) -> None:
    ledger = tmp_path / "ledger"
    store, tools = await sandboxed_act(location, ledger)
    registry = _slow_caller()
    sandbox = ProcessSandbox(tmp_path / "runs")
    client = SessionClient(store)
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        await client.submit("s1", "r1", {"task": {"kind": "caller"}})
        async with running_hands(store, sandbox, bus):
            (op,) = (await runner.drive("s1")).awaiting
            await assert_eventually(lambda: _running(sandbox, op), within=20)
            await client.cancel("s1", request_id="r1", reason="not needed any more")
            await runner.drive("s1")  # settles the task; its outbox asks the Hands to stop
            await assert_eventually(lambda: _parked(store, op), within=20)
    # it had started: whether its effect happened is unknown, and the record says so
    record = await store.get_operation(op)
    assert record is not None and record.cancel is not None
    assert "not needed any more" in record.cancel
    assert await store.get_operation_result(op) is None
    assert await sandbox.state(op) is None and runs(ledger) == []
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.outcome is Outcome.CANCELLED


async def test_a_hands_beat_shows_its_operations_containers_and_backlog(
    tmp_path: Path, location: StoreLocation
) -> None:
    """For the console's fleet page: while an operation runs, the Hands' beat in the store
    names it, its container, the slots and the dispatch stream (one delivered, not yet
    acknowledged; the second call waits in the stream, the only slot being busy); a
    Hands that stops removes its beat."""
    ledger = tmp_path / "ledger"
    store, tools = await sandboxed_act(location, ledger)
    registry = _slow_caller()
    sandbox = ProcessSandbox(tmp_path / "runs")
    client = SessionClient(store)
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        for session in ("s1", "s2"):
            await client.submit(session, "r1", {"task": {"kind": "caller"}})
        async with running_hands(store, sandbox, bus, concurrency=1) as hands:
            (first,) = (await runner.drive("s1")).awaiting
            await assert_eventually(lambda: _running(sandbox, first), within=20)
            (second,) = (await runner.drive("s2")).awaiting
            beat = await hands.beat()
            assert [(b.executor, b.in_use) for b in await store.fleet.hands()] == [
                ("hands-test", 1)
            ]
            (running,) = beat.running
            assert (running.operation_id, running.tool, running.state) == (first, "act", "running")
            assert running.container is not None and running.session_id == "s1"
            assert beat.concurrency == 1 and beat.queue is not None
            assert (beat.queue.pending, beat.queue.ack_pending) == (1, 1)
            assert beat.queue.oldest_age_seconds > 0
            for session in ("s1", "s2"):
                await client.cancel(session, request_id="r1", reason="done looking")
                await runner.drive(session)
        assert await store.fleet.hands() == []
        assert second != first


async def test_cancelling_a_task_whose_dispatch_is_queued_means_it_never_runs(
    tmp_path: Path, location: StoreLocation
) -> None:
    """Defect 4 of issue 13: the cancellation is recorded in the store before anyone is
    told, so the dispatch still queued (no Hands listening yet) never starts."""
    ledger = tmp_path / "ledger"
    store, tools = await sandboxed_act(location, ledger)
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    sandbox = ProcessSandbox(tmp_path / "runs")
    client = SessionClient(store)
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        await client.submit("s1", "r1", {"task": {"kind": "caller", "input": "hi"}})
        (op,) = (await runner.drive("s1")).awaiting  # dispatched; no Hands yet
        await client.cancel("s1", request_id="r1", reason="not needed any more")
        await runner.drive("s1")  # settles the task; nobody hears the broadcast
        async with running_hands(store, sandbox, bus):
            await assert_eventually(lambda: _has_result(store, op), within=20)
            await assert_eventually(lambda: _queue_empty(bus), within=20)
    result = await store.get_operation_result(op)
    assert result is not None and result.termination == "cancelled", result
    assert runs(ledger) == []


async def _parked(store: SessionStore, op: str) -> bool:
    record = await store.get_operation(op)
    return record is not None and record.status is OperationStatus.UNCERTAIN


async def _queue_empty(bus: Bus) -> bool:
    info = await bus.js.stream_info(bus.stream(DISPATCH_STREAM))
    return info.state.messages == 0


async def sandboxed_act(
    location: StoreLocation, ledger: Path
) -> tuple[SessionStore, LocalDispatcher]:
    """A store with the ``act`` ledger tool registered, and Brain tools running it on
    the Hands."""
    store = await location.open()
    tools = LocalDispatcher()
    tools.add_sandboxed(await store.tools.register(ledger_tool("act", ledger)))
    return store, tools


async def _running(sandbox: ProcessSandbox, op: str) -> bool:
    return await sandbox.state(op) is not None


async def _has_result(store: SessionStore, op: str) -> bool:
    return await store.get_operation_result(op) is not None


async def test_a_task_waiting_on_an_operation_the_hands_parked_is_reported_parked(
    tmp_path: Path, location: StoreLocation
) -> None:
    """An unsafe tool without a query whose earlier attempt died: the Hands park it as
    uncertain (never re-run), and the Brain's report names the waiting task and why."""
    store = await location.open()
    tools = LocalDispatcher()
    unsafe = ledger_tool("act", tmp_path / "ledger", ReplayPolicy.UNSAFE)
    tools.add_sandboxed(await store.tools.register(unsafe))
    registry = Registry()
    registry.add(kind("caller", {"start": _call}))
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        await SessionClient(store).submit("s1", "r1", {"task": {"kind": "caller", "input": "hi"}})
        (op,) = (await runner.drive("s1")).awaiting
        await _claimed_by_a_dead_executor(store, op)
        async with running_hands(store, ProcessSandbox(tmp_path / "runs"), bus):
            await assert_eventually(lambda: _uncertain(store, op), within=20)
        report = await runner.drive("s1")
    assert report.active and list(report.parked) == ["root.r1"]
    assert (
        report.parked["root.r1"].startswith("uncertain:") and "operator" in report.parked["root.r1"]
    )
    assert runs(tmp_path / "ledger") == []


async def _claimed_by_a_dead_executor(store: SessionStore, op: str) -> None:
    """Attempt 1 was claimed long ago by an executor that died without a container."""
    past = utcnow() - timedelta(hours=1)
    await store.create_operation(
        Operation(
            operation_id=op,
            session_id="s1",
            task_id="root.r1",
            tool="act",
            tool_version=1,
            args={"message": "hi"},
            status=OperationStatus.RUNNING,
            attempts=1,
            executor="dead",
            deadline=past,
        )
    )


async def _uncertain(store: SessionStore, op: str) -> bool:
    record = await store.get_operation(op)
    return record is not None and record.status is OperationStatus.UNCERTAIN
