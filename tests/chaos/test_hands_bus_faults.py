"""The bus fails, nothing is lost: nats-server restarted mid-run, the dispatch stream lost
under a running Hands. (Running out of deliveries never decides an outcome:
``tests/integration/test_trust_boundary.py``.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

import nats.js.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from brain.context import PhaseContext
from brain.embedded import run_until_idle
from brain.outcome import Done, Effects, Next, PhaseOutcome
from brain.registry import Registry
from brain.results import ResultWaiter
from brain.runner import SessionRunner
from brain.tools import LocalDispatcher
from bus import DISPATCH_STREAM, DISPATCH_SUBJECTS, Bus
from contracts import Outcome
from contracts.tool import Dispatch
from hands.sandbox.process import ProcessSandbox
from hands.service import CONSUMER, HandsService
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.intents import commit_intent
from tests.support.kernel import kind
from tests.support.processes import ROOT
from tests.support.toolpath import (
    brain_services,
    ledger_tool,
    running_hands,
    runs,
    scratch_bus,
)

pytestmark = [pytest.mark.chaos, pytest.mark.nats, pytest.mark.sqlite, pytest.mark.slow]

STEPS = 6


async def _steps(ctx: PhaseContext) -> PhaseOutcome:
    """Six operations one after another; each result applied as it comes."""
    done = ctx.memo_int("done")
    if done == STEPS:
        return Done(result=done)
    performed = await ctx.operation("act", {"sleep": 0.2}, f"step-{done}")
    effects = Effects(applied_operations=(performed.operation_id,), memo={"done": done + 1})
    return Next(phase="start", effects=effects)


def _restart_nats() -> None:
    subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", "restart", "nats"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.exclusive  # the dev stack's nats-server, which every test uses
async def test_restarting_nats_mid_run_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    tools = LocalDispatcher()
    tools.add_sandboxed(await store.tools.register(ledger_tool("act", ledger)))
    registry = Registry()
    registry.add(kind("steps", {"start": _steps}))
    async with scratch_bus() as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        await SessionClient(store).submit("s1", "r1", {"task": {"kind": "steps"}})
        async with (
            running_hands(store, ProcessSandbox(tmp_path / "runs"), bus),
            ResultWaiter(bus, "s1") as results,
        ):
            drive = asyncio.create_task(run_until_idle(runner, "s1", results=results))
            await assert_eventually(lambda: _ran(ledger, 2), within=30)
            await asyncio.to_thread(_restart_nats)
            report = await asyncio.wait_for(drive, 120)
    assert not report.active
    handle = await store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.outcome is Outcome.SUCCEEDED
    ran = Counter(runs(ledger))
    assert len(ran) == STEPS and set(ran.values()) == {1}, ran
    applied: Counter[str] = Counter()
    async for record in store.history("s1"):
        applied.update(record.commit.applied_operations)
    assert set(applied) == set(ran) and set(applied.values()) == {1}
    await store.close()


async def test_a_dispatch_stream_lost_under_a_running_hands_is_consumed_again(
    tmp_path: Path,
) -> None:
    """NATS loses the dispatch stream and the Hands' consumer with it (a restart without
    its data): the Hands creates both again, and the next dispatch is run once and its
    result recorded. (Before, the Hands kept fetching from the vanished consumer.)"""
    ledger = tmp_path / "ledger"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    await store.tools.register(ledger_tool("act", ledger))
    async with (
        scratch_bus() as bus,
        running_hands(store, ProcessSandbox(tmp_path / "runs"), bus),
    ):
        await assert_eventually(lambda: _consumer_exists(bus), within=10)  # consuming
        await bus.js.delete_stream(bus.stream(DISPATCH_STREAM))
        await assert_eventually(lambda: _consumer_exists(bus), within=10)
        dispatch = Dispatch(
            operation_id="op-after", session_id="s1", tool="act", tool_version=1, args={}
        )
        await commit_intent(store, dispatch)
        await bus.publish("tools.dispatch.act", dispatch, msg_id="op-after")
        await assert_eventually(lambda: _has_result(store, "op-after"), within=10)
    result = await store.get_operation_result("op-after")
    assert result is not None and result.succeeded, result
    assert runs(ledger) == ["op-after"]
    await store.close()


async def test_a_consumer_lost_without_a_fetch_error_is_bound_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py reads some answers of the server to a pull of a deleted consumer (409
    consumer deleted, 404) as "no messages yet": the fetches just come back empty, and a
    Hands waiting for an error waits forever (the test above failed so in full runs, with
    no "fetch failed" logged). Here every fetch comes back empty, as then: the Hands asks
    whether its consumer still exists while fetches are empty, and binds it again."""
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    fetching = asyncio.Event()

    async def empty(self: HandsService, pull: object) -> list[object]:
        fetching.set()
        await asyncio.sleep(0.2)
        return []

    monkeypatch.setattr(HandsService, "_fetch", empty)
    async with (
        scratch_bus() as bus,
        running_hands(store, ProcessSandbox(tmp_path / "runs"), bus),
    ):
        await asyncio.wait_for(fetching.wait(), 10)  # bound: its start is over
        await bus.js.delete_stream(bus.stream(DISPATCH_STREAM))
        await assert_eventually(lambda: _consumer_exists(bus), within=10)
    await store.close()


async def _ran(ledger: Path, count: int) -> bool:
    return len(await asyncio.to_thread(runs, ledger)) >= count


async def _consumer_exists(bus: Bus) -> bool:
    try:
        await bus.js.consumer_info(bus.stream(DISPATCH_STREAM), CONSUMER)
    except nats.js.errors.NotFoundError:
        return False
    return True


async def _has_result(store: SessionStore, op: str) -> bool:
    return await store.get_operation_result(op) is not None


async def test_a_consumer_left_by_an_earlier_version_gets_unlimited_deliveries(
    tmp_path: Path,
) -> None:
    """A deployment upgraded in place finds the dispatch consumer an earlier version made
    (5 deliveries, then the message was dropped): the Hands brings its configuration up
    to date on start instead of binding to it as it is."""
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    async with scratch_bus() as bus:
        await bus.js.add_consumer(
            bus.stream(DISPATCH_STREAM),
            ConsumerConfig(
                durable_name=CONSUMER,
                ack_policy=AckPolicy.EXPLICIT,
                max_deliver=5,
                filter_subject=bus.subject(DISPATCH_SUBJECTS),
            ),
        )
        async with running_hands(store, ProcessSandbox(tmp_path / "runs"), bus):
            await assert_eventually(lambda: _max_deliver(bus, -1), within=10)
    await store.close()


async def _max_deliver(bus: Bus, expected: int) -> bool:
    info = await bus.js.consumer_info(bus.stream(DISPATCH_STREAM), CONSUMER)
    return info.config.max_deliver == expected
