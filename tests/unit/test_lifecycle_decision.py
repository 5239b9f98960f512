"""The operation lifecycle's decision table, row by row (``lifecycle/decision.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import Operation, OperationStatus, ReplayPolicy
from lifecycle.decision import Evidence, LifecycleSettings, Policy, Step, decide

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SETTINGS = LifecycleSettings()
SAFE = Policy(replay=ReplayPolicy.SAFE)
UNSAFE = Policy(replay=ReplayPolicy.UNSAFE)
QUERYABLE = Policy(replay=ReplayPolicy.UNSAFE, queryable=True)


def record(status: OperationStatus = OperationStatus.RUNNING, **fields: Any) -> Operation:
    defaults: dict[str, Any] = {
        "operation_id": "op-1",
        "session_id": "s1",
        "tool": "act",
        "status": status,
        "attempts": 1,
        "executor": "other",
        "deadline": NOW - timedelta(seconds=10),
    }
    return Operation(**{**defaults, **fields})


def step(evidence: dict[str, Any], policy: Policy = SAFE) -> Step:
    return decide(Evidence(now=NOW, **evidence), policy, SETTINGS).step


@pytest.mark.parametrize(
    ("evidence", "policy", "expected"),
    [
        ({"record": None, "has_result": True}, SAFE, Step.REUSE),
        ({"record": record(), "has_result": True}, UNSAFE, Step.REUSE),
        ({"record": None}, UNSAFE, Step.START),
        ({"record": record(OperationStatus.ACCEPTED, attempts=0)}, UNSAFE, Step.START),
        (
            {"record": record(OperationStatus.ACCEPTED, attempts=0, cancel="stop")},
            UNSAFE,
            Step.CANCELLED,
        ),
        ({"record": record(OperationStatus.CANCELLED)}, SAFE, Step.CANCELLED),
        ({"record": record(OperationStatus.UNCERTAIN)}, SAFE, Step.PARKED),
        ({"record": record(), "run_exists": True}, UNSAFE, Step.RECONNECT),
        ({"record": record(deadline=NOW + timedelta(seconds=5))}, UNSAFE, Step.WAIT),
        # within the takeover margin after the deadline: still waiting
        ({"record": record(deadline=NOW - timedelta(seconds=1))}, UNSAFE, Step.WAIT),
        (
            {"record": record(deadline=NOW + timedelta(seconds=5)), "attempt_over": True},
            SAFE,
            Step.REPLAY,
        ),
        ({"record": record()}, SAFE, Step.REPLAY),
        ({"record": record()}, QUERYABLE, Step.VERIFY),
        ({"record": record()}, UNSAFE, Step.PARK),
        ({"record": record(attempts=3)}, SAFE, Step.PARK),
        ({"record": record(cancel="stop")}, SAFE, Step.PARK),
        ({"record": record(attempts=0)}, UNSAFE, Step.START),
    ],
)
def test_each_row_of_the_table(evidence: dict[str, Any], policy: Policy, expected: Step) -> None:
    assert step(evidence, policy) is expected


def test_a_wait_says_until_when() -> None:
    decision = decide(
        Evidence(record=record(deadline=NOW + timedelta(seconds=5)), now=NOW), UNSAFE, SETTINGS
    )
    assert decision.until == NOW + timedelta(seconds=5) + SETTINGS.takeover_margin
