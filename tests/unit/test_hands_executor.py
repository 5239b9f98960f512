"""The Hands executor on the process sandbox: once per operation id, whatever died before.

Each tool here appends one line to a ledger file when it runs its action, so the tests
count real executions, not calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from contracts import Operation, OperationStatus, ReplayPolicy, utcnow
from contracts.tool import Dispatch, DispatchMode, ResultEvent, Termination, ToolDefinition
from hands.executor import MAX_ARGUMENT_BYTES, MAX_ATTEMPTS, Busy, Executor
from hands.sandbox import OwnedRun, RunOutcome, RunSpec, RunState, container_name
from hands.sandbox import process as process_sandbox
from hands.sandbox.output import Capture
from hands.sandbox.process import ProcessSandbox
from lifecycle.decision import LifecycleSettings
from session_store import SessionStore, open_store
from tests.support.eventually import assert_eventually
from tests.support.intents import CommittingExecutor

pytestmark = pytest.mark.sqlite

# Appends the operation id to $LEDGER (the action), then prints its output.
ACT = """
import json, os, sys, time
args = json.loads(os.environ["BH_ARGUMENTS"])
time.sleep(args.get("sleep", 0))
with open(os.environ["LEDGER"], "a") as ledger:
    ledger.write(os.environ["BH_OPERATION_ID"] + "\\n")
if args.get("garbage"):
    print("not json")
    sys.exit(0)
print(json.dumps({"echo": args.get("message"), "op": os.environ["BH_OPERATION_ID"]}))
sys.exit(args.get("exit", 0))
"""
# Reports whether the ledger holds the operation id.
QUERY = """
import json, os
seen = open(os.environ["LEDGER"]).read().split() if os.path.exists(os.environ["LEDGER"]) else []
found = os.environ["BH_OPERATION_ID"] in seen
output = {"op": os.environ["BH_OPERATION_ID"]} if found else None
print(json.dumps({"found": found, "output": output}))
"""
SCHEMA = {
    "type": "object",
    "properties": {
        "message": {"type": "string"},
        "sleep": {"type": "number"},
        "exit": {"type": "integer"},
        "garbage": {"type": "boolean"},
        "pad": {"type": "string"},
    },
    "additionalProperties": False,
}


@dataclass
class Hands:
    store: SessionStore
    sandbox: ProcessSandbox
    ledger: Path
    events: list[ResultEvent] = field(default_factory=list)

    def executor(self, name: str = "hands-a") -> Executor:
        async def publish(event: ResultEvent) -> None:
            self.events.append(event)

        return CommittingExecutor(
            store=self.store, sandbox=self.sandbox, publish=publish, executor_id=name
        )

    def runs(self) -> list[str]:
        return self.ledger.read_text().split() if self.ledger.exists() else []

    async def tool(self, name: str, replay: ReplayPolicy, *, query: bool = False) -> None:
        await self.store.tools.register(
            ToolDefinition(
                name=name,
                version=1,
                parameters=SCHEMA,
                replay=replay,
                timeout_s=20,
                command=(sys.executable, "-c", ACT),
                query=(sys.executable, "-c", QUERY) if query else None,
                config={"LEDGER": str(self.ledger)},
                image=f"test/{name}",
                image_id=f"sha256:{name}",
            )
        )


@pytest.fixture
async def hands(tmp_path: Path) -> AsyncIterator[Hands]:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    h = Hands(store, ProcessSandbox(tmp_path / "runs"), tmp_path / "ledger")
    await h.tool("safe", ReplayPolicy.SAFE)
    await h.tool("unsafe", ReplayPolicy.UNSAFE)
    await h.tool("queryable", ReplayPolicy.UNSAFE, query=True)
    yield h
    await store.close()


def dispatch(tool: str = "safe", op: str = "op-1", **args: Any) -> Dispatch:
    return Dispatch(
        operation_id=op,
        session_id="s1",
        task_id="t1",
        tool=tool,
        tool_version=1,
        args=args or {"message": "hi"},
    )


async def test_an_operation_runs_once_and_its_result_is_written_and_announced(
    hands: Hands,
) -> None:
    executor = hands.executor()
    result = await executor.handle(dispatch())
    assert result is not None and result.succeeded
    assert result.output == {"echo": "hi", "op": "op-1"}
    assert (result.termination, result.exit_code, result.path) == ("exited", 0, "executed")
    again = await executor.handle(dispatch())  # redelivered: answered from the store
    assert again == result
    assert hands.runs() == ["op-1"]
    assert [e.operation_id for e in hands.events] == ["op-1", "op-1"]
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.status is OperationStatus.SUCCEEDED
    assert record.attempts == 1 and record.executor == "hands-a"
    assert await hands.sandbox.state("op-1") is None  # the container was removed


async def test_a_new_executor_reconnects_to_a_run_whose_executor_died(hands: Hands) -> None:
    """The first executor claimed and started the run, then died: the run goes on, and
    the next executor waits for it instead of starting the action again."""
    first = dispatch(sleep=0.5)
    await hands.executor("dead")._record(first)  # the record as the first one left it
    record = await hands.store.get_operation("op-1")
    assert record is not None
    definition = await hands.store.tools.get("safe", 1)
    assert definition is not None
    claimed = (await hands.executor("dead")._claim(record, definition, new_attempt=True)).record
    spec = RunSpec(operation_id="op-1", session_id="s1", tool=definition, args=first.args)
    hands.sandbox._start(spec, hands.sandbox.root / "bh-op-1")  # started, never collected
    result = await hands.executor("b").handle(first)
    assert result is not None and result.succeeded and result.executor == "b"
    assert hands.runs() == ["op-1"]
    final = await hands.store.get_operation("op-1")
    assert final is not None and final.attempts == claimed.attempts == 1


async def _started_without_a_pid(hands: Hands, d: Dispatch) -> RunSpec:
    """The first executor claimed the run and wrote its ``meta.json``, then died before
    the detached wrapper recorded the run's pid (a start taking its time on a busy host)."""
    await hands.executor("dead")._record(d)
    record = await hands.store.get_operation("op-1")
    definition = await hands.store.tools.get(d.tool, 1)
    assert record is not None and definition is not None
    await hands.executor("dead")._claim(record, definition, new_attempt=True)
    where = hands.sandbox.root / "bh-op-1"
    where.mkdir(parents=True)
    started = utcnow().isoformat()
    meta = {"started_at": started, "operation_id": "op-1", "session_id": "s1"}
    meta |= {"mode": "run", "deadline": (utcnow() + timedelta(seconds=20)).isoformat()}
    (where / "meta.json").write_text(json.dumps(meta))
    return RunSpec(operation_id="op-1", session_id="s1", tool=definition, args=d.args)


async def test_a_run_whose_start_is_still_recording_its_pid_is_waited_for(
    hands: Hands,
) -> None:
    """Found mid-start (no pid yet), the run is not taken for dead: the next executor
    waits, and collects it once the wrapper is up and done."""
    d = dispatch("queryable", sleep=0.2)
    spec = await _started_without_a_pid(hands, d)
    where = hands.sandbox.root / "bh-op-1"

    async def late_wrapper() -> None:
        await asyncio.sleep(0.5)
        hands.sandbox._launch(spec, where)  # the wrapper of the first start, late

    starting = asyncio.create_task(late_wrapper())
    result = await hands.executor("b").handle(d)
    await starting
    assert result is not None and result.succeeded and result.path == "executed", result
    assert hands.runs() == ["op-1"]


async def test_a_start_that_never_recorded_a_pid_is_an_unknown_outcome(hands: Hands) -> None:
    """No pid ever: whether the action began is unknown, so it is recovered by the tool's
    policy (verified by its query here), never reported as a failure of the tool."""
    hands.sandbox.start_grace = timedelta(milliseconds=300)
    d = dispatch("queryable")
    await _started_without_a_pid(hands, d)
    hands.ledger.write_text("op-1\n")  # the action did happen
    result = await hands.executor("b").handle(d)
    assert result is not None and result.succeeded and result.path == "verified", result
    assert hands.runs() == ["op-1"]


async def test_a_start_killed_before_it_wrote_its_metadata_is_an_unknown_outcome(
    hands: Hands,
) -> None:
    """The first executor made the run's directory and died before ``meta.json`` (the
    window a CI run hit): the next executor does not fail on the missing file on every
    delivery; it waits the start grace and recovers by the tool's policy."""
    hands.sandbox.start_grace = timedelta(milliseconds=300)
    d = dispatch("queryable")
    await _started_without_a_pid(hands, d)
    (hands.sandbox.root / "bh-op-1" / "meta.json").unlink()
    # its query says the action has not happened, which proves nothing before the first
    # attempt's deadline: it waits
    with pytest.raises(Busy) as busy:
        await hands.executor("b").handle(d)
    assert hands.runs() == []
    later = hands.executor("b")
    later.clock = lambda: busy.value.until + timedelta(seconds=1)
    result = await later.handle(d)
    # still not found after the deadline: it runs, once
    assert result is not None and result.succeeded and result.path == "executed", result
    assert hands.runs() == ["op-1"]


async def test_a_run_removed_while_an_executor_reconnects_is_cancelled_not_an_error(
    hands: Hands, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel removed the run's directory between an executor's look and its read of
    the start (seen in the chaos run after a cancel storm: FileNotFoundError out of
    ``handle``): the run reads as cancelled, like a removed container."""
    d = dispatch("queryable")
    spec = await _started_without_a_pid(hands, d)
    where = hands.sandbox.root / "bh-op-1"
    real = process_sandbox._begun

    def removed_first(path: Path) -> object:
        shutil.rmtree(path)
        return real(path)

    monkeypatch.setattr(process_sandbox, "_begun", removed_first)
    outcome = await hands.sandbox.run(spec)
    assert outcome.termination is Termination.CANCELLED and not where.exists(), outcome


async def test_a_query_that_times_out_parks_the_operation(hands: Hands) -> None:
    """Issue 13, defect 17: a query that never answers is stopped at the tool's timeout
    and the outcome stays unknown: the operation is parked for an operator, not run
    (the action may have happened), not failed, not asked again forever."""
    await hands.store.tools.register(
        ToolDefinition(
            name="stuck",
            version=1,
            parameters=SCHEMA,
            replay=ReplayPolicy.UNSAFE,
            timeout_s=1,
            command=(sys.executable, "-c", ACT),
            query=(sys.executable, "-c", "import time; time.sleep(600)"),
            config={"LEDGER": str(hands.ledger)},
            image="test/stuck",
            image_id="sha256:stuck",
        )
    )
    d = dispatch("stuck")
    await _attempted_without_a_container(hands, d)
    result = await asyncio.wait_for(hands.executor().handle(d), 20)
    assert result is None and hands.runs() == []
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.status is OperationStatus.UNCERTAIN, record
    assert "did not answer within 1" in (record.reason or "")
    assert await hands.store.get_operation_result("op-1") is None


async def _attempted_without_a_container(hands: Hands, d: Dispatch) -> Operation:
    """An executor claimed attempt 1 and died before (or after) its container, which is
    gone; its claim's deadline has passed: the outcome is unknown."""
    dead = hands.executor("dead")
    dead.clock = lambda: utcnow() - timedelta(hours=1)
    record = await dead._record(d)
    definition = await hands.store.tools.get(d.tool, 1)
    assert definition is not None
    return (await dead._claim(record, definition, new_attempt=True)).record


async def test_a_claim_without_a_container_is_waited_for_until_its_deadline(
    hands: Hands,
) -> None:
    """Another executor claimed the operation and may be about to start its container:
    the outcome is not unknown yet, so nothing is recovered, parked or run."""
    record = await hands.executor("other")._record(dispatch("unsafe"))
    definition = await hands.store.tools.get("unsafe", 1)
    assert definition is not None
    claimed = (await hands.executor("other")._claim(record, definition, new_attempt=True)).record
    with pytest.raises(Busy) as busy:
        await hands.executor().handle(dispatch("unsafe"))
    assert claimed.deadline is not None
    assert busy.value.until == claimed.deadline + LifecycleSettings().takeover_margin
    current = await hands.store.get_operation("op-1")
    assert current == claimed and hands.runs() == []


async def test_unknown_outcome_of_a_safe_tool_is_replayed_with_the_same_id(hands: Hands) -> None:
    await _attempted_without_a_container(hands, dispatch("safe"))
    result = await hands.executor().handle(dispatch("safe"))
    assert result is not None and result.path == "replayed"
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.attempts == 2


async def test_unknown_outcome_of_an_unsafe_tool_with_a_query_is_verified(hands: Hands) -> None:
    await _attempted_without_a_container(hands, dispatch("queryable"))
    hands.ledger.write_text("op-1\n")  # it did happen before its executor died
    result = await hands.executor().handle(dispatch("queryable"))
    assert result is not None and result.path == "verified" and result.output == {"op": "op-1"}
    assert hands.runs() == ["op-1"]  # verified, not sent again


async def test_an_unsafe_tool_not_found_by_its_query_runs(hands: Hands) -> None:
    await _attempted_without_a_container(hands, dispatch("queryable"))
    result = await hands.executor().handle(dispatch("queryable"))
    assert result is not None and result.path == "executed"
    assert hands.runs() == ["op-1"]


async def test_a_query_that_finds_nothing_before_the_attempts_deadline_runs_nothing_yet(
    hands: Hands,
) -> None:
    """This executor's attempt ended with its outcome unknown (exit 75: e.g. its
    connection broke mid-request) well before its deadline: its request may still be in
    flight at the destination, so a query that finds nothing proves nothing yet. Found
    in the compose deployment: a replay 2.5 s after such a query, while the first
    request was still held by the server, executed the operation twice."""
    mine = hands.executor()
    record = await mine._record(dispatch("queryable"))
    definition = await hands.store.tools.get("queryable", 1)
    assert definition is not None
    claimed = (await mine._claim(record, definition, new_attempt=True)).record
    with pytest.raises(Busy) as busy:
        await hands.executor().handle(dispatch("queryable"))
    assert claimed.deadline is not None
    assert busy.value.until == claimed.deadline + LifecycleSettings().takeover_margin
    with pytest.raises(Busy) as again:
        await hands.executor().handle(dispatch("queryable"))
    assert again.value.until == busy.value.until, "asking again does not move the wait"
    assert hands.runs() == [], "verified as not found yet, and not run again"


async def test_an_unsafe_tool_without_a_query_is_parked_never_rerun(hands: Hands) -> None:
    await _attempted_without_a_container(hands, dispatch("unsafe"))
    assert await hands.executor().handle(dispatch("unsafe")) is None
    assert await hands.executor().handle(dispatch("unsafe")) is None
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.status is OperationStatus.UNCERTAIN
    assert "not re-run" in (record.reason or "")
    assert hands.runs() == []
    assert await hands.store.get_operation_result("op-1") is None


@pytest.mark.parametrize(
    ("d", "code", "says"),
    [
        (dispatch("nope"), "not_found", "not registered"),
        (dispatch(message=7), "invalid_input", "invalid at message"),
        (dispatch(extra=1), "invalid_input", "extra"),
        (dispatch(pad="x" * (MAX_ARGUMENT_BYTES + 1)), "payload_too_large", "limit"),
    ],
)
async def test_bad_requests_get_a_failed_result_and_run_nothing(
    hands: Hands, d: Dispatch, code: str, says: str
) -> None:
    result = await hands.executor().handle(d)
    assert result is not None and not result.succeeded and result.error is not None
    assert result.error.code == code and says in result.error.message
    assert hands.runs() == []
    assert [e.operation_id for e in hands.events] == ["op-1"]


@pytest.mark.parametrize(
    ("args", "termination", "exit_code", "code"),
    [
        ({"garbage": True}, Termination.INVALID_OUTPUT, 0, "invalid_output"),
        ({"exit": 3}, Termination.EXITED, 3, "tool_failed"),
    ],
)
async def test_a_run_that_fails_says_how(
    hands: Hands, args: dict[str, Any], termination: Termination, exit_code: int, code: str
) -> None:
    result = await hands.executor().handle(dispatch(**args))
    assert result is not None and not result.succeeded and result.error is not None
    assert (result.termination, result.exit_code, result.error.code) == (
        termination.value,
        exit_code,
        code,
    )
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.status is OperationStatus.FAILED


async def test_a_stale_executor_cannot_overwrite_a_result(hands: Hands) -> None:
    result = await hands.executor("a").handle(dispatch())
    assert result is not None
    stale = result.model_copy(update={"output": {"echo": "other"}, "executor": "stale"})
    settled = await hands.executor("stale")._settle(
        await _record(hands, "op-1"), stale
    )  # refused quietly: the first result stands
    assert settled == result
    assert await hands.store.get_operation_result("op-1") == result


async def test_a_cancel_stops_a_running_run_and_leaves_its_outcome_unknown(
    hands: Hands,
) -> None:
    """The claim won: the run started. The cancel is recorded, the run is stopped, and
    the record says what is known: the effect may or may not have happened."""
    running = asyncio.create_task(hands.executor().handle(dispatch(sleep=30)))
    await assert_eventually(lambda: _running_here(hands, "op-1"), within=10)
    assert await hands.executor("api").cancel("op-1", "the user changed their mind") is None
    assert await asyncio.wait_for(running, 10) is None
    assert await hands.sandbox.state("op-1") is None
    final = await hands.store.get_operation("op-1")
    assert final is not None and final.status is OperationStatus.UNCERTAIN, final
    assert final.cancel is not None and "stopped while running" in (final.reason or "")
    assert await hands.store.get_operation_result("op-1") is None


async def test_a_cancel_before_the_claim_means_the_run_never_starts(hands: Hands) -> None:
    d = dispatch()
    await hands.executor()._record(d)
    result = await hands.executor("api").cancel("op-1", "not wanted")
    assert result is not None and result.termination == "cancelled"
    again = await hands.executor().handle(d)  # the queued dispatch arrives later
    assert again == result and hands.runs() == []
    final = await hands.store.get_operation("op-1")
    assert final is not None and final.status is OperationStatus.CANCELLED


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def _running_here(hands: Hands, op: str) -> bool:
    return await hands.sandbox.state(op) is not None


async def test_verify_records_what_the_query_found(hands: Hands) -> None:
    await _attempted_without_a_container(hands, dispatch("queryable"))
    assert await hands.executor().verify("op-1") is None  # not found: nothing recorded
    hands.ledger.write_text("op-1\n")
    found = await hands.executor().verify("op-1")
    assert found is not None and found.path == "verified"
    assert await hands.store.get_operation_result("op-1") == found


async def test_the_reaper_collects_an_exited_run_nobody_collected(hands: Hands) -> None:
    """Its Hands died after the run ended, before any redelivery: another Hands' reaper
    claims it (the record names the collector, as a reconnect's claim does; of two
    collectors one wins) and writes its result."""
    d = dispatch()
    record = await hands.executor("dead")._record(d)
    definition = await hands.store.tools.get("safe", 1)
    assert definition is not None
    await hands.executor("dead")._claim(record, definition, new_attempt=True)
    spec = RunSpec(operation_id="op-1", session_id="s1", tool=definition, args=d.args)
    await hands.sandbox.run(spec)  # ran to the end; its executor died before the result
    touched = await hands.executor("b").reconcile()
    assert touched == ["bh-op-1"]
    result = await hands.store.get_operation_result("op-1")
    assert result is not None and result.succeeded
    assert hands.runs() == ["op-1"]
    assert await hands.sandbox.state("op-1", DispatchMode.RUN) is None
    final = await _record(hands, "op-1")
    assert (final.executor, final.attempts, final.status) == ("b", 1, OperationStatus.SUCCEEDED)


async def _record(hands: Hands, op: str) -> Operation:
    record = await hands.store.get_operation(op)
    assert record is not None
    return record


async def test_a_run_that_says_its_outcome_is_unknown_is_verified_not_failed(
    hands: Hands,
) -> None:
    """Exit 75: the tool cannot tell whether its action happened (a lost response)."""
    result = await hands.executor().handle(dispatch("queryable", exit=75))
    assert result is not None and result.succeeded and result.path == "verified"
    assert hands.runs() == ["op-1"]  # the query found it: not run again


async def test_unknown_outcomes_are_bounded_then_parked(hands: Hands) -> None:
    assert await hands.executor().handle(dispatch("safe", exit=75)) is None
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.status is OperationStatus.UNCERTAIN
    assert record.attempts == MAX_ATTEMPTS and "operator" in (record.reason or "")
    assert hands.runs() == ["op-1"] * MAX_ATTEMPTS


@pytest.mark.parametrize("whom", ["the tool", "its process group"])
async def test_a_run_killed_from_outside_is_an_unknown_outcome_not_a_tool_failure(
    hands: Hands, whom: str
) -> None:
    """A SIGTERM the executor did not send (a host shutting down, an operator's kill):
    the safe tool runs again with the same id instead of failing its task."""
    running = asyncio.create_task(hands.executor().handle(dispatch(sleep=1.5)))
    run = hands.sandbox.root / container_name("op-1", DispatchMode.RUN)
    await assert_eventually(lambda: _exists(run / "pid"), within=10)
    wrapper = int((run / "pid").read_text())
    if whom == "the tool":
        await assert_eventually(lambda: _has_children(wrapper), within=10)
        os.kill(psutil.Process(wrapper).children()[0].pid, signal.SIGTERM)
    else:
        os.killpg(wrapper, signal.SIGTERM)
    result = await asyncio.wait_for(running, 20)
    assert result is not None
    assert (result.succeeded, result.path) == (True, "replayed"), result.error
    record = await hands.store.get_operation("op-1")
    assert record is not None and record.attempts == 2


async def _has_children(pid: int) -> bool:
    return bool(psutil.Process(pid).children())


async def test_a_run_another_executor_collected_meanwhile_is_not_started_again(
    hands: Hands,
) -> None:
    """Two Hands on one engine (a redelivery while the first still runs it): the second
    finds the run there and reconnects, but the first collects and removes it in
    between. Reconnecting only ever collects: the action is not started a second time
    (seen in the compose deployment as an email sent twice)."""
    d = dispatch(sleep=0.5)
    first = asyncio.create_task(hands.executor("a").handle(d))
    await assert_eventually(lambda: _running_here(hands, "op-1"), within=10)

    class SameEngine(ProcessSandbox):
        """The second Hands' view of the same runs; the first finishes before it looks."""

        async def run(
            self, spec: RunSpec, *, log: Capture | None = None, guard: Any = None
        ) -> RunOutcome:
            await first
            return await super().run(spec, log=log, guard=guard)

    second = hands.executor("b")
    second.sandbox = SameEngine(hands.sandbox.root)
    by_second = await second.handle(d)
    by_first = await first
    assert hands.runs() == ["op-1"]
    assert by_second is not None and by_first is not None
    assert by_second.succeeded and by_second.output == by_first.output


async def test_the_reaper_never_starts_a_run_it_listed_but_someone_removed(
    hands: Hands, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaper's list is a moment old: a run it saw exited may have been collected and
    removed by the Hands that ran it. Reaping it collects what is there or nothing; it
    never starts the action."""
    d = dispatch()
    record = await hands.executor("a")._record(d)
    definition = await hands.store.tools.get("safe", 1)
    assert definition is not None
    await hands.executor("a")._claim(record, definition, new_attempt=True)
    seen = OwnedRun(
        name="bh-op-1",
        operation_id="op-1",
        session_id="s1",
        mode=DispatchMode.RUN,
        state=RunState.EXITED,
    )

    async def a_moment_old() -> list[OwnedRun]:
        return [seen]

    monkeypatch.setattr(hands.sandbox, "owned", a_moment_old)
    await hands.executor("b").reconcile()
    assert hands.runs() == []
    assert await hands.sandbox.state("op-1") is None


async def test_a_run_removed_without_a_recorded_cancel_is_an_unknown_outcome(
    hands: Hands,
) -> None:
    """Another Hands' reaper removed the run (it took it for overdue) while this one
    followed it: nobody cancelled it, so its outcome is unknown and recovered by the
    tool's policy — not reported as a cancelled tool."""
    running = asyncio.create_task(hands.executor("a").handle(dispatch(sleep=1.0)))
    await assert_eventually(lambda: _running_here(hands, "op-1"), within=10)
    await hands.sandbox.kill("op-1")
    result = await asyncio.wait_for(running, 20)
    assert result is not None
    assert (result.succeeded, result.path) == (True, "replayed"), result.error


async def test_a_hands_stalled_between_its_claim_and_the_start_starts_nothing_once_taken_over(
    hands: Hands,
) -> None:
    """Issue 31, defect 1: a Hands paused between its claim and its container's start
    (SIGSTOP, a starved engine) for longer than its claim lasts. Another Hands verified
    the operation as not done and ran it meanwhile; the first one, resumed, must not
    start it again (it did: "unsafe tool ran 2 time(s) for one operation")."""
    stalled, resume = asyncio.Event(), asyncio.Event()

    async def pause(point: str) -> None:
        if point == "start:read":
            stalled.set()
            await resume.wait()

    first = CommittingExecutor(
        store=hands.store, sandbox=hands.sandbox, publish=_nowhere, executor_id="a", pause=pause
    )
    d = dispatch("queryable")
    running = asyncio.create_task(first.handle(d))
    await asyncio.wait_for(stalled.wait(), 10)
    claimed = await hands.store.get_operation("op-1")
    assert claimed is not None and claimed.deadline is not None
    other = hands.executor("b")
    past = claimed.deadline + LifecycleSettings().takeover_margin + timedelta(seconds=1)
    other.clock = lambda: past
    by_other = await other.handle(d)
    assert by_other is not None and by_other.succeeded and hands.runs() == ["op-1"]
    resume.set()
    outcome = await asyncio.gather(running, return_exceptions=True)
    assert hands.runs() == ["op-1"], f"started again after the takeover ({outcome})"
    assert isinstance(outcome[0], Busy) and "superseded" in outcome[0].message


async def test_a_claim_whose_time_to_start_passed_is_renewed_before_its_run_starts(
    hands: Hands,
) -> None:
    """A stall between the claim and the start that nobody took advantage of: the claim
    is renewed (a new revision, a new deadline) and the run starts under it, once."""
    offset = [0.0]

    async def pause(point: str) -> None:
        if point == "start:read":
            offset[0] += 60  # a minute passes on this host's monotonic clock

    executor = CommittingExecutor(
        store=hands.store,
        sandbox=hands.sandbox,
        publish=_nowhere,
        executor_id="a",
        pause=pause,
        monotonic=lambda: time.monotonic() + offset[0],
    )
    result = await executor.handle(dispatch("unsafe"))
    assert result is not None and result.succeeded and hands.runs() == ["op-1"]
    record = await hands.store.get_operation("op-1")
    # accepted, claimed, renewed, succeeded
    assert record is not None and record.rev == 4 and record.attempts == 1, record


async def test_verify_waits_while_another_executors_attempt_may_be_in_flight(
    hands: Hands,
) -> None:
    """Issue 31 (a suspicion, confirmed): ``POST /v1/operations/{id}/verify`` on an
    operation another Hands is running ran the query at once — its "not found" could
    only be wrong (the attempt may land later), and a query timeout parked the running
    operation ``uncertain``. Verify asks only where the lifecycle would ask."""
    other = hands.executor("other")
    record = await other._record(dispatch("queryable"))
    definition = await hands.store.tools.get("queryable", 1)
    assert definition is not None
    claimed = (await other._claim(record, definition, new_attempt=True)).record
    with pytest.raises(Busy) as busy:
        await hands.executor("api").verify("op-1")
    assert claimed.deadline is not None
    assert busy.value.until == claimed.deadline + LifecycleSettings().takeover_margin
    assert await hands.store.get_operation("op-1") == claimed  # nothing written or parked


async def _nowhere(_: ResultEvent) -> None:
    return None
