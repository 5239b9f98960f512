"""Which process runs an attempt, and whether another process can know it has stopped.

A Brain records, with every attempt of an operation, the process that makes it: the
kernel's boot id, the pid namespace, the pid and the process's start time. A process on
the same kernel and in the same pid namespace can then tell *for certain* that the
attempt's process is gone (no such pid, a zombie, or a different process under a reused
pid), and recover at once instead of waiting for the attempt's deadline. From any other
host or namespace nothing is certain, and the deadline decides (invariant 11).
"""

from __future__ import annotations

import os
import socket
from enum import StrEnum
from pathlib import Path

_PROC = Path("/proc")


class ProcessState(StrEnum):
    THIS = "this"  # the calling process itself
    ALIVE = "alive"  # another process that is still running
    GONE = "gone"  # certainly not running any more
    UNKNOWN = "unknown"  # on another host or namespace: cannot tell


def this_process() -> str:
    """This process's identity, e.g. ``linux:3f2a…:4026531836:1234:987654``."""
    pid = os.getpid()
    boot, namespace, started = _boot_id(), _pid_namespace(), start_ticks(pid)
    if boot is None or namespace is None or started is None:
        return f"host:{socket.gethostname()}:{pid}"
    return f"linux:{boot}:{namespace}:{pid}:{started}"


def process_state(process: str | None) -> ProcessState:
    """What can be known here about the process named ``process`` (from ``this_process``)."""
    if process is None:
        return ProcessState.UNKNOWN
    if process == this_process():
        return ProcessState.THIS
    parts = process.split(":")
    if len(parts) != 5 or parts[0] != "linux":
        return ProcessState.UNKNOWN
    _, boot, namespace, pid, started = parts
    if boot != _boot_id() or namespace != _pid_namespace() or not pid.isdigit():
        return ProcessState.UNKNOWN
    now = start_ticks(int(pid))
    if now is None or str(now) != started or run_state(int(pid)) in {"Z", "X"}:
        return ProcessState.GONE
    return ProcessState.ALIVE


def _boot_id() -> str | None:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return str(os.stat(_PROC / "self/ns/pid").st_ino)
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (field 22 of
    ``/proc/<pid>/stat``); None when there is no such process here."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def run_state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``Z`` for a zombie…), None when
    ``/proc`` has no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def program_name(pid: int) -> str | None:
    """The process's command name (field 2 of ``/proc/<pid>/stat``, cut at 15
    characters), None when ``/proc`` has no such process."""
    stat = _stat(pid)
    return stat[stat.index("(") + 1 : stat.rindex(")")] if stat is not None else None


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from field 3 (state) on; None if unavailable."""
    stat = _stat(pid)
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rindex(")") + 2 :].split() if stat is not None else None


def _stat(pid: int) -> str | None:
    try:
        return (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
