"""The store decides, the bus only delivers (issue 13, defects 2, 6, 8 and 18).

A Hands runs an operation only when the session's committed log holds its intent; a
cancellation broadcast is honoured only when the store records it; running out of
deliveries or an outage never decides an outcome. Over real NATS JetStream, with a Hands
service in this process and tools that count their real runs in a ledger.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bus import CANCEL_SUBJECT, DISPATCH_STREAM, Bus, dispatch_subject
from contracts import StoreUnavailable
from contracts.tool import Cancellation, Dispatch, DispatchMode
from hands.executor import Executor
from hands.sandbox import RunOutcome, RunSpec
from hands.sandbox.output import Capture
from hands.sandbox.process import ProcessSandbox
from hands.service import ConsumerSettings, HandsService, publisher
from runtime.cancellation import cancel_and_wait
from session_store import SessionStore, open_store
from tests.support.eventually import assert_eventually
from tests.support.intents import commit_intent
from tests.support.stores import StoreLocation, location_fixture
from tests.support.toolpath import ledger_tool, runs, scratch_bus

pytestmark = [pytest.mark.nats, pytest.mark.sqlite]

#: the malformed-id tests run on SQLite and on S3 (moto), whose keys a 10 kB id overflows
location = location_fixture(("sqlite", "s3"))


def call(op: str, session: str = "victim", **args: Any) -> Dispatch:
    return Dispatch(
        operation_id=op,
        session_id=session,
        task_id="t1",
        tool="act",
        tool_version=1,
        args=args or {"message": "hi"},
    )


def settings(**fields: Any) -> ConsumerSettings:
    """Fast retries; only the fields this version of the service has."""
    wanted = {"retry_delay": timedelta(seconds=0.1), "max_retry_delay": timedelta(seconds=0.3)}
    wanted.update(fields)
    return ConsumerSettings(
        **{k: v for k, v in wanted.items() if k in ConsumerSettings.model_fields}
    )


class Hands:
    def __init__(self, store: SessionStore, bus: Bus, root: Path, sandbox: Any = None) -> None:
        self.store = store
        self.bus = bus
        self.sandbox = sandbox or ProcessSandbox(root / "runs")
        self.executor = Executor(
            store=store, sandbox=self.sandbox, publish=publisher(bus), executor_id="hands-t"
        )
        self.service = HandsService(bus=bus, executor=self.executor, settings=settings())
        self._running: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Hands:
        self._running = asyncio.create_task(self.service.run())
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.service.shutdown()
        if self._running is not None:
            await cancel_and_wait(self._running)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    await store.tools.register(ledger_tool("act", tmp_path / "ledger"))
    yield store
    await store.close()


async def _drained(bus: Bus) -> bool:
    info = await bus.js.stream_info(bus.stream(DISPATCH_STREAM))
    return info.state.messages == 0


async def test_a_dispatch_no_committed_intent_backs_is_refused_counted_and_runs_nothing(
    store: SessionStore, tmp_path: Path
) -> None:
    """Defect 2: a bare client's dispatch for a session that does not exist."""
    async with scratch_bus() as bus, Hands(store, bus, tmp_path) as hands:
        forged = call("op-forged", session="nobody", message="rm -rf")
        await bus.publish(dispatch_subject("act"), forged, msg_id=forged.operation_id)
        await assert_eventually(lambda: _drained(bus), within=15)
    assert runs(tmp_path / "ledger") == []
    assert await store.get_operation("op-forged") is None
    assert await store.get_operation_result("op-forged") is None
    assert hands.executor.metrics.refused_count("dispatch", "not_committed") == 1


async def test_a_forged_dispatch_for_a_victims_next_id_does_not_spoil_the_real_call(
    store: SessionStore, tmp_path: Path
) -> None:
    """Defect 2: ids are a public function of session, task and key, so an attacker can
    send the victim's next id first, with its own arguments."""
    async with scratch_bus() as bus, Hands(store, bus, tmp_path):
        forged = call("op-next", message="attacker's")
        await bus.publish(dispatch_subject("act"), forged, msg_id="op-next.forged")
        await assert_eventually(lambda: _drained(bus), within=15)
        real = call("op-next", message="victim's")
        await commit_intent(store, real)
        await bus.publish(dispatch_subject("act"), real, msg_id="op-next")
        await assert_eventually(lambda: _has_result(store, "op-next"), within=15)
    result = await store.get_operation_result("op-next")
    assert result is not None and result.succeeded, result
    assert result.output == {"echo": "victim's", "op": "op-next"}
    assert runs(tmp_path / "ledger") == ["op-next"]


async def test_a_dispatch_that_differs_from_its_intent_is_refused(
    store: SessionStore, tmp_path: Path
) -> None:
    committed = call("op-x", message="committed")
    await commit_intent(store, committed)
    async with scratch_bus() as bus, Hands(store, bus, tmp_path) as hands:
        changed = call("op-x", message="changed on the wire")
        await bus.publish(dispatch_subject("act"), changed, msg_id="op-x")
        await assert_eventually(lambda: _drained(bus), within=15)
    assert runs(tmp_path / "ledger") == []
    assert await store.get_operation("op-x") is None
    assert hands.executor.metrics.refused_count("dispatch", "not_committed") == 1


async def test_a_cancel_broadcast_the_store_does_not_record_stops_nothing(
    store: SessionStore, tmp_path: Path
) -> None:
    """Defect 18: an unauthenticated ``tools.cancel`` stopped a running tool."""
    real = call("op-run", sleep=1.5)
    await commit_intent(store, real)
    async with scratch_bus() as bus, Hands(store, bus, tmp_path) as hands:
        await bus.publish(dispatch_subject("act"), real, msg_id="op-run")
        await assert_eventually(lambda: _running(hands, "op-run"), within=15)
        forged = Cancellation(operation_id="op-run", session_id="victim", reason="forged")
        await bus.broadcast(CANCEL_SUBJECT, forged)
        await assert_eventually(lambda: _has_result(store, "op-run"), within=15)
    result = await store.get_operation_result("op-run")
    assert result is not None and result.succeeded, result
    assert runs(tmp_path / "ledger") == ["op-run"]
    assert hands.executor.metrics.refused_count("cancel", "not_recorded") == 1


class Outage(ProcessSandbox):
    """An engine away (every call fails) for its first ``failures`` calls, then back."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.failures = failures

    def _away(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("docker engine unreachable (test)")

    async def state(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> Any:
        self._away()
        return await super().state(operation_id, mode)

    async def run(
        self, spec: RunSpec, *, log: Capture | None = None, guard: Any = None
    ) -> RunOutcome:
        self._away()
        return await super().run(spec, log=log, guard=guard)


async def test_an_engine_outage_longer_than_any_delivery_budget_only_delays_the_run(
    store: SessionStore, tmp_path: Path
) -> None:
    """Defects 6 and 8: each outage spent a delivery; at the fifth, the operation was
    written off as ``delivery_exhausted`` without looking at what happened."""
    real = call("op-outage")
    await commit_intent(store, real)
    async with (
        scratch_bus() as bus,
        Hands(store, bus, tmp_path, sandbox=Outage(tmp_path / "runs", failures=7)),
    ):
        await bus.publish(dispatch_subject("act"), real, msg_id="op-outage")
        await assert_eventually(lambda: _has_result(store, "op-outage"), within=30)
    result = await store.get_operation_result("op-outage")
    assert result is not None and result.succeeded, result
    assert runs(tmp_path / "ledger") == ["op-outage"]


async def _has_result(store: SessionStore, op: str) -> bool:
    return await store.get_operation_result(op) is not None


async def _running(hands: Hands, op: str) -> bool:
    return await hands.sandbox.state(op) is not None


#: ids no store can hold, and no Hands may run a container for
MALFORMED_IDS = {"operation_id": "../../etc/passwd", "session_id": "x" * 10_000, "task_id": "a b"}


async def test_messages_with_malformed_ids_are_refused_once_and_never_redelivered(
    location: StoreLocation, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31, finding 10: an insider's dispatch with an id of ``../../etc/passwd`` or
    10 kB validated, then failed on every delivery (a ``ValidationError`` traceback, or
    the store's key too long on S3) and was redelivered forever. Each is terminated,
    counted and logged once without a traceback; so is a cancellation broadcast with
    such an id, and the Hands goes on serving."""
    caplog.set_level(logging.INFO, logger="hands")
    store = await location.open()
    await store.tools.register(ledger_tool("act", tmp_path / "ledger"))
    wire = call("op-ok").model_dump(mode="json")
    async with scratch_bus() as bus, Hands(store, bus, tmp_path) as hands:
        for field, bad in MALFORMED_IDS.items():
            raw = json.dumps(wire | {field: bad}).encode()
            await bus.publish(dispatch_subject("act"), raw, msg_id=f"raw-{field}")
        await assert_eventually(lambda: _drained(bus), within=15)
        metrics = hands.executor.metrics
        assert metrics.refused_count("dispatch", "invalid_id") == len(MALFORMED_IDS)
        for field, bad in MALFORMED_IDS.items():
            raw = json.dumps({"operation_id": "op-ok", "session_id": "s1", field: bad}).encode()
            await bus.broadcast(CANCEL_SUBJECT, raw)
        await assert_eventually(
            lambda: _counted(hands, "cancel", "invalid_id", len(MALFORMED_IDS)), within=10
        )
        real = call("op-ok")
        await commit_intent(store, real)
        await bus.publish(dispatch_subject("act"), real, msg_id="op-ok")
        await assert_eventually(lambda: _has_result(store, "op-ok"), within=15)
    assert metrics.loop_error_count("handle") == 0
    assert runs(tmp_path / "ledger") == ["op-ok"]
    lines = [r for r in caplog.records if r.name.startswith("hands") and r.levelno >= 30]
    refusals = [r for r in lines if "refused" in r.getMessage()]
    assert len(refusals) == 2 * len(MALFORMED_IDS), [r.getMessage()[:200] for r in lines]
    assert all(r.exc_info is None and len(r.getMessage()) < 400 for r in lines)
    assert lines == refusals, "nothing else was logged about them"


async def _counted(hands: Hands, kind: str, reason: str, count: int) -> bool:
    return hands.executor.metrics.refused_count(kind, reason) == count
