"""The chaos harness, small and seeded: every fault kind once, zero violations.
The long run (hundreds of sessions, dozens of Brain kills, every kind five times) is its
own command; its output is recorded in docs/chaos.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from bh.chaos import ChaosConfig, run_chaos, show
from bh.chaos_plan import select
from tests.support.services import in_ci, require

# they restart the dev stack's nats-server and Docker engine, which every test uses
pytestmark = [
    pytest.mark.chaos,
    pytest.mark.redis,
    pytest.mark.nats,
    pytest.mark.slow,
    pytest.mark.exclusive,
]


async def test_a_seeded_run_with_every_fault_kind_has_no_violation(tmp_path: Path) -> None:
    require("BH_REDIS_URL", "Redis")
    require("BH_NATS_URL", "NATS JetStream")
    kinds = select()  # the process sandbox: restart_docker is for --hands-sandbox docker
    config = ChaosConfig(
        seed=7, sessions=10, faults=kinds, fault_every=1.5, deadline=240, work=tmp_path
    )
    report = await run_chaos(config)
    show(report)  # the seed and the schedule, for a replay: bh chaos --seed N
    assert set(report.by_kind()) == set(kinds)
    if in_ci():  # the dev stack's nats-server is ours to restart there
        assert all(t == "ok" for _, f, t in report.schedule if f == "restart_nats")
        assert all("without its data" in t for _, f, t in report.schedule if f == "wipe_nats")
        # scripts/install --for-tests installs libfaketime
        assert all("skipped" not in t for _, f, t in report.schedule if f == "skew_clock")
    paused = [t for _, f, t in report.schedule if f == "pause_hands_mid_start"]
    assert any("stopped right after a claim" in t for t in paused), paused
    assert all("all 4xx" in t for _, f, t in report.schedule if f == "malformed_ids")
    for kind in ("kill_brain_mid_model", "kill_brain_mid_tool", "freeze_brain_mid_tool"):
        assert any(f == kind and "(in POST" in t for _, f, t in report.schedule), kind
    assert report.ok, report.violations
    # faults go on while the work settles: a storm may come more than once
    assert report.submitted == 10 and report.storm_sessions >= 2
    assert report.completed + len(report.failed) == 10 + report.storm_sessions
    assert sum(report.executions.values()) == len(report.executions) > 0
    assert report.stormed, "the cancel storm hit no session"
    assert report.forged["forged"] >= 3  # a dispatch, a result event, a wake job at least
    # the liveness floor held (report.ok), and it had something to judge
    assert report.eligible > 0 and report.operations > 0


@pytest.mark.docker
async def test_engine_restarts_under_running_tool_containers_lose_and_repeat_nothing(
    tmp_path: Path,
) -> None:
    """``count`` in containers (the ``tool-count`` image, tallying in the harness's
    ledger service); the engine restarted twice while the run's containers run, Hands
    and Brains killed: every tally once, every result applied once."""
    require("BH_REDIS_URL", "Redis")
    require("BH_NATS_URL", "NATS JetStream")
    kinds = ("restart_docker", "kill_hands", "kill_brain")
    config = ChaosConfig(
        seed=300,
        sessions=6,
        faults=select(kinds, sandbox="docker"),
        fault_every=3,
        min_each=2,
        hands_sandbox="docker",
        deadline=180,
        work=tmp_path,
    )
    report = await run_chaos(config)
    show(report)
    restarts = [target for _, fault, target in report.schedule if fault == "restart_docker"]
    assert len(restarts) >= 2
    if in_ci():  # the dev stack's engine is ours to restart there
        assert all(target.startswith("ok") for target in restarts), restarts
        assert any("running: " in target for target in restarts), restarts
    assert report.ok, report.violations
    assert report.submitted == 6 and not report.stuck and not report.lost
    assert sum(report.executions.values()) == len(report.executions) > 0
