"""Every row of the operation lifecycle's table, against both executors.

The Brain (in-process tools, ``brain/operations.py``) and the Hands (sandboxed tools,
``hands/executor.py``) decide by one table (``lifecycle/decision.py``). Each row here
sets up the same record in the store, lets each executor meet it, and checks that both
did the same: the step they took and how often the action really ran (a ledger).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from brain.operations import (
    OperationInFlight,
    OperationParked,
    Operations,
    operation_id,
)
from brain.services import Services
from brain.tools import LocalDispatcher, QueryAnswer, ToolSpec
from contracts import (
    Operation,
    OperationResult,
    OperationStatus,
    ReplayPolicy,
    Task,
    ToolFailed,
    utcnow,
)
from contracts.tool import Dispatch, ToolDefinition
from hands.executor import Busy
from hands.sandbox.process import ProcessSandbox
from lifecycle.decision import Step
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store
from tests.support.intents import CommittingExecutor

pytestmark = pytest.mark.sqlite

ARGS = {"message": "hi"}
ACT = """
import json, os
with open(os.environ["LEDGER"], "a") as ledger:
    ledger.write(os.environ["BH_OPERATION_ID"] + "\\n")
print(json.dumps({"op": os.environ["BH_OPERATION_ID"]}))
"""
QUERY = """
import json, os
seen = open(os.environ["LEDGER"]).read().split() if os.path.exists(os.environ["LEDGER"]) else []
found = os.environ["BH_OPERATION_ID"] in seen
print(json.dumps({"found": found, "output": {"op": os.environ["BH_OPERATION_ID"]}}))
"""
TOOLS = {
    "safe": (ReplayPolicy.SAFE, False),
    "unsafe": (ReplayPolicy.UNSAFE, False),
    "queryable": (ReplayPolicy.UNSAFE, True),
}
TASK = Task(id="t1", kind="k", version=1)


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


class Brain:
    """The in-process executor: tools as coroutines writing the same ledger."""

    name = "brain"

    def __init__(self, store: SessionStore, ledger: Path) -> None:
        self.store = store
        self.ledger = ledger
        tools = LocalDispatcher()
        for tool, (replay, queryable) in TOOLS.items():
            tools.register(
                ToolSpec(name=tool, replay=replay, queryable=queryable),
                self._run,
                self._query if queryable else None,
            )
        self.services = Services(
            store=store, tools=tools, crash=CrashPoints(), clock=utcnow, runner_id="brain-a"
        )

    def op(self, key: str) -> str:
        return operation_id("s1", TASK.id, key)

    async def _run(self, args: dict[str, Any], operation_id: str) -> Any:
        with self.ledger.open("a") as ledger:
            ledger.write(operation_id + "\n")
        return {"op": operation_id}

    async def _query(self, args: dict[str, Any], operation_id: str) -> QueryAnswer:
        found = operation_id in ledger_lines(self.ledger)
        return QueryAnswer(found=found, output={"op": operation_id})

    async def meet(self, tool: str, key: str) -> Step:
        try:
            performed = await Operations(self.services, "s1", TASK).perform(tool, ARGS, key)
        except OperationInFlight:
            return Step.WAIT
        except OperationParked:
            record = await self.store.get_operation(self.op(key))
            assert record is not None and record.status is OperationStatus.UNCERTAIN
            return Step.PARK
        except ToolFailed as failed:
            if failed.details.get("attempts"):
                return Step.FAIL
            assert "cancel" in failed.message
            return Step.CANCELLED
        return {
            "reused": Step.REUSE,
            "executed": Step.START,
            "replayed": Step.REPLAY,
            "verified": Step.VERIFY,
        }[performed.path]


class Hands:
    """The Hands' executor on the process sandbox, tools writing the same ledger."""

    name = "hands"

    def __init__(self, store: SessionStore, ledger: Path, root: Path) -> None:
        self.store = store
        self.ledger = ledger
        self.root = root

    async def register(self) -> None:
        for tool, (replay, queryable) in TOOLS.items():
            await self.store.tools.register(
                ToolDefinition(
                    name=tool,
                    version=1,
                    parameters={"type": "object"},
                    replay=replay,
                    timeout_s=20,
                    command=(sys.executable, "-c", ACT),
                    query=(sys.executable, "-c", QUERY) if queryable else None,
                    config={"LEDGER": str(self.ledger)},
                    image=f"test/{tool}",
                    image_id=f"sha256:{tool}",
                )
            )

    def op(self, key: str) -> str:
        return f"op-hands-{key}"

    async def meet(self, tool: str, key: str) -> Step:
        async def publish(_: object) -> None:
            return None

        executor = CommittingExecutor(
            store=self.store,
            sandbox=ProcessSandbox(self.root),
            publish=publish,
            executor_id="hands-a",
        )
        dispatch = Dispatch(
            operation_id=self.op(key),
            session_id="s1",
            task_id=TASK.id,
            tool=tool,
            tool_version=1,
            args=ARGS,
            replay=TOOLS[tool][0],
        )
        before = await self.store.get_operation_result(dispatch.operation_id)
        try:
            result = await executor.handle(dispatch)
        except Busy:
            return Step.WAIT
        if result is None:
            record = await self.store.get_operation(dispatch.operation_id)
            assert record is not None and record.status is OperationStatus.UNCERTAIN
            return Step.PARK
        if before is not None:
            return Step.REUSE
        if result.termination == "cancelled":
            return Step.CANCELLED
        if result.error is not None and result.error.code == "attempts_exhausted":
            return Step.FAIL
        return {"executed": Step.START, "replayed": Step.REPLAY, "verified": Step.VERIFY}[
            result.path or ""
        ]


async def _record(store: SessionStore, op: str, tool: str, **fields: Any) -> Operation:
    return await store.create_operation(
        Operation(
            operation_id=op,
            session_id="s1",
            task_id=TASK.id,
            tool=tool,
            tool_version=1,
            args=ARGS,
            replay=TOOLS[tool][0],
            **fields,
        )
    )


def attempt(**extra: Any) -> dict[str, Any]:
    """An attempt by another executor whose deadline passed long ago."""
    return {
        "status": OperationStatus.RUNNING,
        "attempts": 1,
        "executor": "someone-gone",
        "deadline": utcnow() - timedelta(minutes=5),
        **extra,
    }


async def nothing(store: SessionStore, op: str, tool: str) -> None:
    return None


async def with_result(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, status=OperationStatus.RUNNING, attempts=1)
    await store.put_operation_result(
        OperationResult(operation_id=op, session_id="s1", succeeded=True, output={"op": op})
    )


async def in_flight(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, **attempt(deadline=utcnow() + timedelta(minutes=5)))


async def over(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, **attempt())


async def over_and_happened(store: SessionStore, op: str, tool: str, ledger: Path) -> None:
    await _record(store, op, tool, **attempt())
    with ledger.open("a") as lines:
        lines.write(op + "\n")


async def exhausted(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, **attempt(attempts=3))


async def exhausted_and_happened(store: SessionStore, op: str, tool: str, ledger: Path) -> None:
    await _record(store, op, tool, **attempt(attempts=3))
    with ledger.open("a") as lines:
        lines.write(op + "\n")


async def uncertain(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, status=OperationStatus.UNCERTAIN, attempts=1)


async def cancelled(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, status=OperationStatus.CANCELLED, reason="cancel: no")


async def cancelled_after_attempt(store: SessionStore, op: str, tool: str) -> None:
    await _record(store, op, tool, **attempt(cancel="cancel: stop"))


# (row, tool, setup, expected step, runs of the action this row adds)
ROWS: list[tuple[str, str, Any, Step, int]] = [
    ("a result is stored", "unsafe", with_result, Step.REUSE, 0),
    ("no record", "unsafe", nothing, Step.START, 1),
    ("another attempt may be in flight", "safe", in_flight, Step.WAIT, 0),
    ("attempt over, replay-safe", "safe", over, Step.REPLAY, 1),
    ("attempt over, unsafe with a query: found", "queryable", over_and_happened, Step.VERIFY, 0),
    ("attempt over, unsafe with a query: not found", "queryable", over, Step.START, 1),
    ("attempt over, unsafe without a query", "unsafe", over, Step.PARK, 0),
    ("attempts exhausted", "safe", exhausted, Step.PARK, 0),
    # issue 31, defect 14: a query is asked before an operator is: found, its result;
    # not found (after the attempt's deadline), it did not happen and no start is left
    (
        "attempts exhausted, with a query: found",
        "queryable",
        exhausted_and_happened,
        Step.VERIFY,
        0,
    ),
    ("attempts exhausted, with a query: not found", "queryable", exhausted, Step.FAIL, 0),
    ("uncertain", "safe", uncertain, Step.PARK, 0),
    ("cancelled before it ran", "unsafe", cancelled, Step.CANCELLED, 0),
    ("cancelled after an attempt", "safe", cancelled_after_attempt, Step.PARK, 0),
]


@pytest.mark.parametrize("executor", ["brain", "hands"])
@pytest.mark.parametrize(
    ("row", "tool", "setup", "expected", "runs"), ROWS, ids=[r[0] for r in ROWS]
)
async def test_each_row_the_same_for_both_executors(
    tmp_path: Path,
    executor: str,
    row: str,
    tool: str,
    setup: Any,
    expected: Step,
    runs: int,
) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    ledger = tmp_path / "ledger"
    meeting: Brain | Hands
    if executor == "brain":
        meeting = Brain(store, ledger)
    else:
        meeting = Hands(store, ledger, tmp_path / "runs")
        await meeting.register()
    op = meeting.op("k")
    if setup in (over_and_happened, exhausted_and_happened):
        await setup(store, op, tool, ledger)
    else:
        await setup(store, op, tool)
    before = len(ledger_lines(ledger))
    try:
        step = await asyncio.wait_for(meeting.meet(tool, "k"), 30)
        assert step is expected, f"{executor}: {row}"
        assert len(ledger_lines(ledger)) - before == runs, f"{executor}: {row}"
    finally:
        await store.close()
