"""An unisolated process sandbox: tools as host processes, for unit tests and laptops
without Docker. It isolates NOTHING (no network, filesystem or resource limits beyond
the timeout and the output cap) — ``DockerSandbox`` is the real one — but it keeps the
contract that matters for exactly-once: a run is named by its operation id, survives
the death of its executor, and is reconnected to instead of started again.

Each run lives in ``<root>/<container name>/``: a detached wrapper process
(``python -m hands.sandbox.process``) runs the command with stdout and stderr in files
and writes the exit status to ``exit`` when it ends. The directory is the "container":
present means started; ``exit`` present means exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from contracts import NotFound
from contracts.tool import EXIT_UNKNOWN, DispatchMode, Termination
from hands.sandbox import (
    OwnedRun,
    RunOutcome,
    RunSpec,
    RunState,
    StartGuard,
    attempt_environment,
    container_name,
)
from hands.sandbox.output import Capture
from session_store.clock import boot_seconds

_POLL = 0.05
_TAIL = 8 * 1024


class ProcessSandbox:
    """Runs each tool's ``command`` (which must be set) as a process on this host."""

    def __init__(
        self,
        root: Path,
        *,
        grace: timedelta = timedelta(seconds=1),
        start_grace: timedelta = timedelta(seconds=10),
    ) -> None:
        """``start_grace``: how long a run found mid-start (its executor died before the
        detached wrapper recorded the pid) may take to record it."""
        self.root = root
        self.grace = grace
        self.start_grace = start_grace
        root.mkdir(parents=True, exist_ok=True)

    async def check(self) -> None:
        """The runs' directory is there and writable."""
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise OSError(f"the process sandbox's run directory {self.root} is not writable")

    async def run(
        self, spec: RunSpec, *, log: Capture | None = None, guard: StartGuard | None = None
    ) -> RunOutcome:
        """``log`` is not fed: this local sandbox collects stderr at the end only.

        Times are measured on the machine's boot-time clock (the run's start is kept in
        its directory as such): a reconnect from another process measures the same, and
        no process's wall clock counts."""
        name = container_name(spec.operation_id, spec.mode)
        where = self.root / name
        reconnected = where.exists()
        if not reconnected and spec.collect_only:
            return RunOutcome(
                termination=Termination.CANCELLED,
                container=name,
                reconnected=True,
                absent=True,
                detail="no run of the operation to collect (collected or removed meanwhile)",
            )
        if not reconnected:
            if guard is not None:
                await guard.prove()
                guard.check()
            self._start(spec, where)
        begun = _begun(where)
        if begun is None:  # removed meanwhile (``kill``: the run was cancelled)
            return _removed(name, reconnected)
        started, since = begun
        stop_at = time.monotonic() + (since + spec.tool.timeout_s - boot_seconds())
        if guard is not None:
            stop_at = min(stop_at, guard.stop_at)
        limit = spec.tool.limits.output_bytes
        termination: Termination | None = None
        while not (where / "exit").exists():
            if _size(where / "stdout") > limit:
                termination = Termination.OUTPUT_LIMIT
            elif time.monotonic() > stop_at:
                termination = Termination.TIMEOUT
            if termination is not None:
                self._stop(where)
                break
            if not _alive(where):
                if not where.exists():  # killed and removed while followed
                    return _removed(name, reconnected)
                if (where / "pid").exists() or (where / "exit").exists():
                    break
                if boot_seconds() > since + self.start_grace.total_seconds():
                    return self._interrupted(name, started, reconnected)
            await asyncio.sleep(_POLL)
        return self._collect(where, name, started, termination, reconnected)

    def _interrupted(self, name: str, started: datetime, reconnected: bool) -> RunOutcome:
        """A start that never recorded its run: whether the action began is unknown."""
        why = "its start was interrupted before the run was recorded; whether it began is unknown"
        return RunOutcome(
            termination=Termination.EXITED,
            exit_code=EXIT_UNKNOWN,
            output={"error": why},
            container=name,
            reconnected=reconnected,
            started_at=started,
            finished_at=datetime.now(UTC),
            detail=why,
        )

    def _start(self, spec: RunSpec, where: Path) -> None:
        _command(spec)  # refused before anything is created
        # The directory appears whole, with its meta.json, or not at all: an executor
        # killed halfway leaves a hidden scratch directory, never a run without metadata.
        scratch = Path(tempfile.mkdtemp(prefix=f".{where.name}.", dir=where.parent))
        meta = {
            "started_at": datetime.now(UTC).isoformat(),
            "started_boot": boot_seconds(),
            "operation_id": spec.operation_id,
            "session_id": spec.session_id,
            "mode": spec.mode.value,
            "deadline": spec.overdue_at().isoformat(),
        }
        (scratch / "meta.json").write_text(json.dumps(meta))
        scratch.rename(where)
        self._launch(spec, where)

    def _launch(self, spec: RunSpec, where: Path) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "BH_OPERATION_ID": spec.operation_id,
            "BH_ARGUMENTS": json.dumps(spec.args),
            "BH_MODE": spec.mode.value,
            **spec.tool.config,
            **attempt_environment(spec),
            **(spec.workspace.host_environment() if spec.workspace is not None else {}),
        }
        # The wrapper detaches (double fork, new session) and records its pid before this
        # returns: the run outlives this process, and is nobody's zombie.
        subprocess.run(
            [sys.executable, "-m", "hands.sandbox.process", str(where), *_command(spec)],
            env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )

    def _stop(self, where: Path) -> None:
        pid = _read(where / "pid").strip()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGKILL)

    def _collect(
        self,
        where: Path,
        name: str,
        started: datetime,
        termination: Termination | None,
        reconnected: bool,
    ) -> RunOutcome:
        stdout = _read(where / "stdout")
        stderr = _read(where / "stderr")
        exit_text = _read(where / "exit").strip()
        code = int(exit_text) if exit_text else None
        output: Any = None
        try:
            output = json.loads(stdout) if stdout.strip() else None
            parsed = stdout.strip() != ""
        except ValueError:
            parsed = False
        if termination is None:
            if code is None or code < 0:  # a signal this sandbox did not send
                termination = Termination.INTERRUPTED
            elif code == 0 and not parsed:
                termination = Termination.INVALID_OUTPUT
            else:
                termination = Termination.EXITED
        return RunOutcome(
            termination=termination,
            exit_code=code,
            output=output if parsed else None,
            log_tail=stderr[-_TAIL:],
            stdout_tail=stdout[-_TAIL:],
            truncated=termination is Termination.OUTPUT_LIMIT,
            container=name,
            reconnected=reconnected,
            started_at=started,
            finished_at=datetime.now(UTC),
            detail=_interrupted_how(code) if termination is Termination.INTERRUPTED else "",
        )

    async def state(
        self, operation_id: str, mode: DispatchMode = DispatchMode.RUN
    ) -> RunState | None:
        where = self.root / container_name(operation_id, mode)
        if not where.exists():
            return None
        return RunState.EXITED if (where / "exit").exists() else RunState.RUNNING

    async def kill(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> bool:
        where = self.root / container_name(operation_id, mode)
        if where.exists() and (where / "meta.json").exists():
            self._stop(where)
        shutil.rmtree(where, ignore_errors=True)
        return not where.exists()

    async def remove(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> None:
        shutil.rmtree(self.root / container_name(operation_id, mode), ignore_errors=True)

    async def owned(self) -> list[OwnedRun]:
        runs = []
        for where in sorted(self.root.iterdir()):
            meta_path = where / "meta.json"
            if where.name.startswith(".") or not meta_path.exists():
                continue
            meta = json.loads(meta_path.read_text())
            runs.append(
                OwnedRun(
                    name=where.name,
                    operation_id=meta["operation_id"],
                    session_id=meta["session_id"],
                    mode=DispatchMode(meta["mode"]),
                    state=RunState.EXITED if (where / "exit").exists() else RunState.RUNNING,
                    deadline=datetime.fromisoformat(meta["deadline"]),
                )
            )
        return runs

    async def image_id(self, image: str) -> str:
        return f"process:{image}"

    async def image_labels(self, image: str) -> dict[str, Any]:
        raise NotFound("the process sandbox has no images; define tools directly")

    async def close(self) -> None:
        return None


def _removed(name: str, reconnected: bool) -> RunOutcome:
    return RunOutcome(
        termination=Termination.CANCELLED,
        container=name,
        reconnected=reconnected,
        detail="the run was removed before its end was read (killed)",
    )


def _command(spec: RunSpec) -> tuple[str, ...]:
    command = spec.tool.query if spec.mode is DispatchMode.QUERY else spec.tool.command
    if not command:
        raise NotFound(f"tool {spec.tool.ref} has no {spec.mode.value} command for this sandbox")
    return tuple(command)


def _begun(where: Path) -> tuple[datetime, float] | None:
    """When the run in ``where`` started (for display), and then on the boot-time clock
    (for its timeout): from its metadata, or for a directory without one (left by an
    older executor killed mid-start) from the directory itself; None when the directory
    is gone."""
    try:
        meta = json.loads((where / "meta.json").read_text())
    except FileNotFoundError:
        meta = None
    if meta is not None:
        started = datetime.fromisoformat(meta["started_at"])
        since = meta.get("started_boot")
        if since is None:  # a run of an older executor: as old as its wall-clock age
            since = boot_seconds() - (datetime.now(UTC) - started).total_seconds()
        return started, float(since)
    try:
        changed = where.stat().st_mtime
    except FileNotFoundError:
        return None
    return datetime.fromtimestamp(changed, UTC), boot_seconds() - (time.time() - changed)


def _alive(where: Path) -> bool:
    pid = _read(where / "pid").strip()
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return (where / "exit").exists()  # it may have ended between the two looks
    except PermissionError:
        return True
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return ""


def _interrupted_how(code: int | None) -> str:
    if code is None:
        return "killed before it recorded its exit status (a signal the executor did not send)"
    return f"killed by signal {-code}, which the executor did not send"


def _wrapper(where: Path, command: list[str]) -> int:
    """Detach, then run ``command`` with output in files; record its exit status last
    (atomically)."""
    child = os.fork()
    if child:  # the intermediate: records the run's pid; the caller waits for this only
        (where / "pid.tmp").write_text(str(child))
        os.replace(where / "pid.tmp", where / "pid")
        return 0
    os.setsid()
    with (where / "stdout").open("wb") as out, (where / "stderr").open("wb") as err:
        code = subprocess.call(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    (where / "exit.tmp").write_text(str(code))
    os.replace(where / "exit.tmp", where / "exit")
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_wrapper(Path(sys.argv[1]), sys.argv[2:]))
