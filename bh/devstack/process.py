"""Detached service processes and their pidfiles.

A pidfile exists only for a process ``bh dev`` itself started (``"started_by_us": true``);
a service found already answering gets none. So ``down`` can only ever signal processes
it started, and the start time stored beside the pid guards against a recycled pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from bh.devstack.poll import poll_until
from runtime.incarnation import program_name, run_state, start_ticks

Argv = tuple[str, ...]

_PROC = Path("/proc")
_ROTATE_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class PidRecord:
    """What a pidfile holds: enough to find, verify and stop the process later."""

    pid: int
    argv: Argv
    start_ticks: int | None  # /proc/<pid>/stat field 22; None off Linux
    started_by_us: bool = True

    def to_json(self) -> str:
        return json.dumps(
            {
                "pid": self.pid,
                "argv": list(self.argv),
                "start_ticks": self.start_ticks,
                "started_by_us": self.started_by_us,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PidRecord:
        data = json.loads(text)
        return cls(
            pid=int(data["pid"]),
            argv=tuple(str(arg) for arg in data["argv"]),
            start_ticks=None if data.get("start_ticks") is None else int(data["start_ticks"]),
            started_by_us=bool(data.get("started_by_us", True)),
        )


class Stopped(StrEnum):
    """How ``stop`` ended a process."""

    ALREADY_GONE = "already gone"
    TERMINATED = "terminated"
    KILLED = "killed"
    NOT_OURS = "not started by bh dev: left running"


def read_pidfile(path: Path) -> PidRecord | None:
    """The record in ``path``, or None if there is none or it is unreadable."""
    try:
        return PidRecord.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_pidfile(path: Path, record: PidRecord) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.to_json())
    tmp.replace(path)


def remove_pidfile(path: Path) -> None:
    path.unlink(missing_ok=True)


def spawn(argv: Argv, *, log_path: Path, env: Mapping[str, str]) -> PidRecord:
    """Start ``argv`` in its own session, stdout and stderr appended to ``log_path``.

    ``posix_spawn`` rather than ``Popen``: the pid is all we keep, and a dropped ``Popen``
    object would warn that its child is still running. ``argv[0]`` must be a path.
    """
    _prepare_log(log_path, argv)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # setsigdef: undo the SIGPIPE/SIGXFSZ ignore Python installs, as Popen does.
    pid = os.posix_spawn(
        argv[0],
        list(argv),
        dict(env),
        file_actions=actions,
        setsid=True,
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )
    return PidRecord(pid=pid, argv=argv, start_ticks=start_ticks(pid))


def is_running(record: PidRecord) -> bool:
    """True if the recorded process still runs (not a zombie, not a recycled pid)."""
    if not _pid_alive(record.pid):
        return False
    return record.start_ticks is None or start_ticks(record.pid) == record.start_ticks


def runs(pid: int, program: str) -> bool:
    """True if ``program`` (its command name) runs under ``pid``: not a zombie, not
    another program that got the pid since."""
    return _pid_alive(pid) and program_name(pid) == program


def stop(record: PidRecord, *, timeout: timedelta) -> Stopped:
    """SIGTERM the process group, then SIGKILL it if still running after ``timeout``."""
    if not record.started_by_us:
        return Stopped.NOT_OURS
    if not is_running(record):
        return Stopped.ALREADY_GONE
    _signal_group(record.pid, signal.SIGTERM)
    if poll_until(lambda: not is_running(record), timeout=timeout):
        return Stopped.TERMINATED
    _signal_group(record.pid, signal.SIGKILL)
    poll_until(lambda: not is_running(record), timeout=timedelta(seconds=5))
    return Stopped.KILLED


def reload(record: PidRecord) -> bool:
    """SIGHUP a process ``bh dev`` started and that still runs (servers re-read their
    config on it: nats-server keeps its connections); whether it was signalled."""
    if not record.started_by_us or not is_running(record):
        return False
    try:
        os.kill(record.pid, signal.SIGHUP)
    except ProcessLookupError:
        return False
    return True


def log_tail(path: Path, *, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' if there is none)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 16384))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _prepare_log(log_path: Path, argv: Sequence[str]) -> None:
    """Keep one previous log once it grows large, and mark where this start begins."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if log_path.stat().st_size > _ROTATE_BYTES:
            log_path.replace(log_path.with_suffix(".log.1"))
    with log_path.open("a") as handle:
        handle.write(f"--- bh dev: starting {shlex.join(argv)}\n")


def _pid_alive(pid: int) -> bool:
    # Reap it if it is our own child, so a crashed child is seen dead, not a zombie.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    state = run_state(pid)
    if state is not None:
        return state not in ("Z", "X")
    if _PROC.joinpath("self", "stat").exists():
        return False  # Linux, and /proc/<pid> is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pid: int, signum: signal.Signals) -> None:
    """Signal the whole group the process leads (we start each in its own session)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass
