"""A chaos run where little succeeds does not pass (issue 31: "a floor of succeeded work
in every chaos run"): the share of eligible sessions answered, and of their operations
succeeded, must reach ``min_succeeded``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bh.chaos_check import _liveness
from bh.chaos_report import ChaosReport
from contracts import Operation, OperationStatus
from session_store import open_store


async def run(tmp_path: Path, report: ChaosReport, ops: dict[str, list[str]], floor: float) -> Any:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        for session_id, statuses in ops.items():
            for n, status in enumerate(statuses):
                record = await store.create_operation(
                    Operation(operation_id=f"op-{session_id}-{n}", session_id=session_id, tool="t")
                )
                if status != "accepted":
                    record = await store.transition_operation(record, OperationStatus.RUNNING)
                    await store.transition_operation(record, OperationStatus(status))
        storms = SimpleNamespace(stormed={"s4": "queued"})
        await _liveness(store, 5, report, storms, floor)  # type: ignore[arg-type]
    finally:
        await store.close()
    return report


async def test_a_run_where_most_sessions_failed_is_a_violation(tmp_path: Path) -> None:
    report = ChaosReport(seed=1, failed={"s0": "boom", "s1": "boom"}, meant_to_fail={"s3"})
    await run(tmp_path, report, {"s2": ["succeeded"]}, 0.8)
    # eligible: s0, s1, s2 (s3 fails by design, s4 was stormed); answered: s2 only
    assert (report.eligible, report.answered) == (3, 1)
    assert any("1 of 3 eligible sessions answered" in v for v in report.violations)


async def test_failed_operations_of_eligible_sessions_count_too(tmp_path: Path) -> None:
    report = ChaosReport(seed=1)
    ops = {"s0": ["succeeded", "failed", "failed"], "s3": ["failed"]}
    await run(tmp_path, report, ops, 0.8)
    assert (report.operations, report.operations_succeeded) == (4, 1)
    assert report.violations == [
        "liveness: 1 of 4 operations of eligible sessions succeeded (under 80%)"
    ]


async def test_a_run_above_its_floor_passes(tmp_path: Path) -> None:
    report = ChaosReport(seed=1, failed={"s0": "crashed its executor"})
    await run(tmp_path, report, {"s1": ["succeeded"], "s2": ["succeeded"]}, 0.75)
    assert (report.eligible, report.answered) == (4, 3) and report.violations == []
