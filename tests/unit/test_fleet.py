"""The one launcher (``bh.fleet``): components from the service table, attached children
for the demo, chaos and benchmarks, detached processes with pidfiles for ``bh up``."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from bh.deploy import service
from bh.devstack.process import read_pidfile
from bh.fleet import PROBE_PORTS, Component, Fleet, from_table

SLEEPER = (
    sys.executable,
    "-c",
    "import time; print('listening on http://x:1', flush=True); time.sleep(60)",
)


def test_components_come_from_the_service_table() -> None:
    brain = from_table(service("brain"), "brain-2", ("--plugin", "p:q"), 2)
    assert brain.argv[1:] == ("-m", "brain", "worker", "--plugin", "p:q")
    assert dict(brain.env) == {"BH_PROBE_PORT": str(PROBE_PORTS["brain"] + 2)}
    assert brain.health == f"http://127.0.0.1:{PROBE_PORTS['brain'] + 2}/readyz"
    api = from_table(service("session-api"), "session-api", port=9123)
    assert api.argv[-2:] == ("--port", "9123") and api.health == "http://127.0.0.1:9123/readyz"


async def test_an_attached_process_runs_to_its_end_and_says_its_address(tmp_path: Path) -> None:
    fleet = Fleet(
        tmp_path,
        {"PATH": os.environ["PATH"]},
        {"server": list(SLEEPER), "job": [sys.executable, "-c", "raise SystemExit(3)"]},
    )
    try:
        fleet.start("server")
        assert await fleet.address("server") == "http://x:1"
        assert await fleet.run("job") == 3
        fleet.kill("server")
        assert fleet.processes["server"].returncode == -signal.SIGKILL
    finally:
        fleet.stop_all()


def test_detached_processes_outlive_the_launcher_and_are_retired_by_name(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    first = Fleet(tmp_path, env, [Component("a", SLEEPER), Component("b", SLEEPER)], detached=True)
    assert first.ensure() == ["a", "b"]
    again = Fleet(tmp_path, env, [Component("a", SLEEPER)], detached=True)
    assert again.ensure() == []  # a runs: not started twice
    b = read_pidfile(again.pidfile("b"))
    assert b is not None
    assert again.retire() == ["b"]  # scaled down
    assert set(again.running()) == {"a"}
    stopped = again.stop_detached()
    assert set(stopped) == {"a"} and again.running() == {}
    deadline = time.monotonic() + 10
    while _alive(b.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(b.pid)


def test_a_component_that_dies_is_named_with_its_log(tmp_path: Path) -> None:
    argv = (sys.executable, "-c", "print('bad config'); raise SystemExit(2)")
    dying = Component("dies", argv, health="http://127.0.0.1:9/readyz")
    fleet = Fleet(tmp_path, {"PATH": os.environ["PATH"]}, [dying], detached=True)
    fleet.ensure()
    with pytest.raises(SystemExit, match=r"dies did not come up:\n(.|\n)*bad config"):
        fleet.await_healthy(within=10)
    fleet.stop_detached()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"
