"""Cancel against claim, interleaved deterministically (issue 13, defect 5).

Hooks between reading an operation's record and writing its next revision let each test
choose who writes first. Exactly one of {cancel, claim} wins each revision; the loser
re-reads and acts on what won, and the result says what happened: ``cancelled`` only if
the run never started.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts import OperationStatus, ReplayPolicy
from contracts.tool import Dispatch
from hands.executor import Busy, Executor
from hands.sandbox.process import ProcessSandbox
from session_store import SessionStore, open_store
from tests.support.intents import commit_intent
from tests.support.toolpath import ledger_tool, runs

pytestmark = pytest.mark.sqlite

CALL = Dispatch(
    operation_id="op-race",
    session_id="s1",
    task_id="t1",
    tool="act",
    tool_version=1,
    args={"message": "hi"},
    replay=ReplayPolicy.SAFE,
)


class Gate:
    """Holds the coroutine that reaches ``name`` until ``open`` is called."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reached = asyncio.Event()
        self._open = asyncio.Event()

    async def __call__(self, point: str) -> None:
        if point == self.name and not self._open.is_set():
            self.reached.set()
            await self._open.wait()

    def open(self) -> None:
        self._open.set()


async def _nothing(_: str) -> None:
    return None


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    await store.tools.register(ledger_tool("act", tmp_path / "ledger"))
    await commit_intent(store, CALL)
    yield store
    await store.close()


def executor(store: SessionStore, tmp_path: Path, name: str, pause=_nothing) -> Executor:  # type: ignore[no-untyped-def]
    async def publish(_: object) -> None:
        return None

    return Executor(
        store=store,
        sandbox=ProcessSandbox(tmp_path / "runs"),
        publish=publish,
        executor_id=name,
        pause=pause,
    )


async def test_a_claim_between_the_cancels_read_and_write_means_the_run_never_starts(
    store: SessionStore, tmp_path: Path
) -> None:
    """The cancel read ``accepted``; the claim then wins the next revision; the cancel's
    write loses, re-reads ``running`` and records its request there; the claimer sees it
    before starting and records ``cancelled`` — the tool never ran."""
    hands = executor(store, tmp_path, "hands-a")
    await hands._record(CALL)  # accepted: recorded, not claimed
    gate = Gate("cancel:read")
    canceller = executor(store, tmp_path, "api", pause=gate)
    cancelling = asyncio.create_task(canceller.cancel("op-race", "not wanted"))
    await gate.reached.wait()
    start_gate = Gate("start:read")
    claimer = executor(store, tmp_path, "hands-a", pause=start_gate)
    handling = asyncio.create_task(claimer.handle(CALL))
    await start_gate.reached.wait()  # the claim is written; the run not started
    gate.open()  # the cancel's write loses, re-reads ``running``, records its request
    await cancelling
    start_gate.open()
    result = await asyncio.wait_for(handling, 10)
    assert result is not None and result.termination == "cancelled", result
    record = await store.get_operation("op-race")
    assert record is not None and record.status is OperationStatus.CANCELLED
    assert record.attempts == 1 and record.cancel is not None
    assert runs(tmp_path / "ledger") == []


async def test_a_cancel_between_the_claims_read_and_write_wins_and_the_claim_gives_way(
    store: SessionStore, tmp_path: Path
) -> None:
    """The claimer read ``accepted``; the cancel writes ``cancelled`` first; the claim's
    write loses, and the next delivery finds the operation settled, never run."""
    await executor(store, tmp_path, "hands-a")._record(CALL)
    gate = Gate("claim:read")
    claimer = executor(store, tmp_path, "hands-a", pause=gate)
    handling = asyncio.create_task(claimer.handle(CALL))
    await gate.reached.wait()
    cancelled = await executor(store, tmp_path, "api").cancel("op-race", "not wanted")
    assert cancelled is not None and cancelled.termination == "cancelled"
    gate.open()
    with pytest.raises(Busy):  # lost the revision: the message comes back later
        await handling
    again = await executor(store, tmp_path, "hands-a").handle(CALL)
    assert again == cancelled
    record = await store.get_operation("op-race")
    assert record is not None and record.status is OperationStatus.CANCELLED
    assert record.attempts == 0
    assert runs(tmp_path / "ledger") == []


async def test_a_cancel_that_finds_the_run_finished_keeps_its_real_outcome(
    store: SessionStore, tmp_path: Path
) -> None:
    done = await executor(store, tmp_path, "hands-a").handle(CALL)
    assert done is not None and done.succeeded
    after = await executor(store, tmp_path, "api").cancel("op-race", "too late")
    assert after == done
    record = await store.get_operation("op-race")
    assert record is not None and record.status is OperationStatus.SUCCEEDED
    assert runs(tmp_path / "ledger") == ["op-race"]
