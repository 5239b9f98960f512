"""`bh dev` process handling against real (tiny, local) processes: no network.

Each fake service is a Python child listening on a Unix socket; "ready" means the socket
accepts a connection, so a dead child is never mistaken for a running one.
"""

from __future__ import annotations

import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from bh.devstack.poll import poll_until
from bh.devstack.process import (
    Argv,
    PidRecord,
    Stopped,
    is_running,
    read_pidfile,
    reload,
    spawn,
    stop,
    write_pidfile,
)
from bh.devstack.report import State
from bh.devstack.service import Service
from bh.devstack.stack import Stack
from bh.devstack.state import StateDir

CHILD = """
import os, signal, socket, sys, time
path, mode = sys.argv[1], sys.argv[2]
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "note-hup":  # a server re-reading its config: leaves a mark beside its socket
    signal.signal(signal.SIGHUP, lambda *_: open(path + ".reloaded", "a").write("hup "))
if os.path.exists(path):
    os.unlink(path)
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
print("listening", flush=True)
time.sleep(120)
"""


def _listener(sock: Path, mode: str = "plain") -> Argv:
    return (sys.executable, "-c", CHILD, str(sock), mode)


def _answers(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(sock))
        except OSError:
            return False
        return True


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="bh-") as path:
        yield Path(path)


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path / "state")


def _service(state: StateDir, sock: Path, *launches: Argv, name: str = "fake") -> Service:
    return Service(
        name=name,
        address=f"unix://{sock}",
        ports=(),
        launches=lambda: launches or (_listener(sock),),
        ready=lambda: _answers(sock),
        exports={f"{name.upper()}_URL": f"unix://{sock}"},
        log_path=state.log(name),
        pid_path=state.pidfile(name),
        ready_timeout=timedelta(seconds=15),
        stop_timeout=timedelta(seconds=5),
    )


def _stack(state: StateDir, *services: Service) -> Stack:
    return Stack(services, state=state, env={"PATH": "/usr/bin:/bin"}, say=lambda _: None)


def _started(argv: Argv, log: Path, sock: Path) -> PidRecord:
    record = spawn(argv, log_path=log, env={})
    assert _wait(lambda: _answers(sock))
    return record


def _wait(condition: Callable[[], bool]) -> bool:
    return poll_until(condition, timeout=timedelta(seconds=15))


def test_stop_terminates_and_the_log_keeps_the_output(tmp_path: Path, sock_dir: Path) -> None:
    sock = sock_dir / "s"
    record = _started(_listener(sock), tmp_path / "x.log", sock)
    assert is_running(record)
    assert stop(record, timeout=timedelta(seconds=5)) is Stopped.TERMINATED
    assert not is_running(record)
    assert "listening" in (tmp_path / "x.log").read_text()
    assert stop(record, timeout=timedelta(seconds=5)) is Stopped.ALREADY_GONE


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path, sock_dir: Path) -> None:
    sock = sock_dir / "s"
    record = _started(_listener(sock, "ignore-term"), tmp_path / "x.log", sock)
    assert stop(record, timeout=timedelta(milliseconds=300)) is Stopped.KILLED
    assert not is_running(record)


def test_a_recycled_pid_is_not_taken_for_ours(tmp_path: Path, sock_dir: Path) -> None:
    sock = sock_dir / "s"
    record = _started(_listener(sock), tmp_path / "x.log", sock)
    if record.start_ticks is None:
        pytest.skip("no /proc here")
    try:
        assert not is_running(replace(record, start_ticks=record.start_ticks + 1))
    finally:
        stop(record, timeout=timedelta(seconds=5))


def test_a_process_we_did_not_start_is_never_signalled(tmp_path: Path, sock_dir: Path) -> None:
    sock = sock_dir / "s"
    record = _started(_listener(sock), tmp_path / "x.log", sock)
    try:
        assert stop(replace(record, started_by_us=False), timeout=timedelta(seconds=1)) is (
            Stopped.NOT_OURS
        )
        assert is_running(record)
    finally:
        stop(record, timeout=timedelta(seconds=5))


def test_up_is_idempotent_and_down_stops_it(state: StateDir, sock_dir: Path) -> None:
    service = _service(state, sock_dir / "s")
    stack = _stack(state, service)

    [first] = stack.up(required=["fake"])
    [second] = stack.up(required=["fake"])
    record = read_pidfile(service.pid_path)

    assert (first.state, second.state) == (State.STARTED, State.ALREADY_RUNNING)
    assert record is not None and is_running(record)
    assert state.env_file.read_text() == f"export FAKE_URL=unix://{sock_dir / 's'}\n"
    [down] = stack.down()
    assert down.state is State.STOPPED
    assert not is_running(record) and not service.ready()
    assert not service.pid_path.exists() and not state.env_file.exists()
    assert [r.state for r in stack.down()] == [State.NOT_RUNNING]


def test_up_reloads_a_running_service_whose_config_changed(state: StateDir, sock_dir: Path) -> None:
    """A nats-server an older ``bh dev up`` started keeps that version's permissions
    until it reloads its config: ``up`` finds it running and reloads it (SIGHUP, which
    keeps its connections) when the config it writes changed, and only then."""
    sock = sock_dir / "s"
    changed = [True, False]

    def refresh(record: PidRecord) -> str:
        return "reloaded" if changed.pop(0) and reload(record) else ""

    service = replace(_service(state, sock, _listener(sock, "note-hup")), refresh=refresh)
    stack = _stack(state, service)
    try:
        assert [r.state for r in stack.up()] == [State.STARTED]  # fresh: nothing to reload
        [again] = stack.up()
        assert again.state is State.ALREADY_RUNNING and again.detail.endswith("; reloaded")
        marks = Path(f"{sock}.reloaded")
        assert _wait(lambda: marks.exists() and marks.read_text() == "hup ")
        [unchanged] = stack.up()
        assert "reloaded" not in unchanged.detail and changed == []
        record = read_pidfile(service.pid_path)
        assert record is not None and is_running(record)  # the same process all along
        assert not reload(replace(record, started_by_us=False))  # never another's
    finally:
        stack.down()


def test_up_falls_back_to_the_next_launch(state: StateDir, sock_dir: Path) -> None:
    sock = sock_dir / "s"
    failing = (sys.executable, "-c", "raise SystemExit('default driver failed')")
    stack = _stack(state, _service(state, sock, failing, _listener(sock)))
    [report] = stack.up(required=["fake"])
    try:
        assert report.state is State.STARTED
        assert "fell back" in report.detail
        assert "default driver failed" in state.log("fake").read_text()
    finally:
        stack.down()


def test_a_required_failure_is_fatal_with_the_log_tail(state: StateDir, sock_dir: Path) -> None:
    failing = (sys.executable, "-c", "raise SystemExit('cannot start')")
    optional = _service(state, sock_dir / "o", failing, name="optional")
    required = _service(state, sock_dir / "r", failing, name="required")
    reports = _stack(state, required, optional).up(required=["required"])
    assert [(r.state, r.fatal) for r in reports] == [(State.FAILED, True), (State.FAILED, False)]
    assert "cannot start" in reports[0].log_tail
    assert "exited" in reports[0].detail
    assert state.env_file.read_text() == ""


def test_a_stale_pidfile_is_cleaned_on_up(state: StateDir, sock_dir: Path) -> None:
    service = _service(state, sock_dir / "s")
    dead = spawn((sys.executable, "-c", "pass"), log_path=state.log("x"), env={})
    assert _wait(lambda: not is_running(dead))
    write_pidfile(service.pid_path, dead)
    stack = _stack(state, service)
    [report] = stack.up(required=["fake"])
    try:
        assert report.state is State.STARTED
        assert "stale pidfile" in report.detail
    finally:
        stack.down()


def test_a_service_running_without_our_pidfile_is_left_alone(
    state: StateDir, sock_dir: Path, tmp_path: Path
) -> None:
    sock = sock_dir / "s"
    foreign = _started(_listener(sock), tmp_path / "foreign.log", sock)
    stack = _stack(state, _service(state, sock))
    try:
        assert [r.state for r in stack.up(required=["fake"])] == [State.EXTERNAL]
        assert [r.state for r in stack.down()] == [State.EXTERNAL]
        assert stack.restart("fake").state is State.FAILED
        assert is_running(foreign)
    finally:
        stop(foreign, timeout=timedelta(seconds=5))


def test_restart_gives_a_fresh_process(state: StateDir, sock_dir: Path) -> None:
    service = _service(state, sock_dir / "s")
    stack = _stack(state, service)
    stack.up(required=["fake"])
    before = read_pidfile(service.pid_path)
    try:
        assert stack.restart("fake").state is State.STARTED
        after = read_pidfile(service.pid_path)
        assert before is not None and after is not None
        assert after.pid != before.pid and not is_running(before) and is_running(after)
    finally:
        stack.down()


def test_a_running_process_with_an_outdated_command_line_is_replaced(
    state: StateDir, sock_dir: Path
) -> None:
    old_sock, new_sock = sock_dir / "old", sock_dir / "new"
    _stack(state, _service(state, old_sock)).up(required=["fake"])
    old = read_pidfile(state.pidfile("fake"))
    stack = _stack(state, _service(state, new_sock))  # e.g. the port setting changed
    try:
        assert [r.state for r in stack.up(required=["fake"])] == [State.STARTED]
        assert old is not None and not is_running(old)
    finally:
        stack.down()
