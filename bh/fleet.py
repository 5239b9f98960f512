"""The one launcher of the system's processes: ``bh up``, ``bh demo``, the chaos harness
and the benchmarks all start their processes through a ``Fleet``.

A ``Component`` is one process: its argv, the URL that answers 200 once it is ready,
and variables of its own. ``from_table`` makes one from the service table
(``bh/deploy/services.py``): ``python -m <module> <args>``, ready on its API port or (a
worker) on a probe port of its own — the same command, port and probe the compose file
and the Kubernetes manifests run. Every process connects to NATS as its role
(``bh.devstack.auth.role_env``) and runs in a session of its own.

Two ways to own them:

* attached (the default; the demo, chaos harness and benchmarks): each process is a
  child of this one, logging to ``<work>/<name>.log``; it can be signalled, killed,
  restarted, run to its end (``run``), and ``stop_all`` ends them;
* detached (``bh up``): each process outlives the launcher, with a pidfile under
  ``<work>/run/`` and its log under ``<work>/logs/``; ``ensure`` starts only what is not
  running, ``retire`` stops the ones no longer wanted, ``stop_detached`` all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx

from bh.deploy import Kind, Service
from bh.devstack.auth import role_env
from bh.devstack.process import (
    Stopped,
    is_running,
    log_tail,
    read_pidfile,
    remove_pidfile,
    spawn,
    stop,
    write_pidfile,
)

#: the workers' probe ports on one host: the scheduler's, and brain-N's and hands-N's
#: are these + N (in a container every worker's is the table's, 8081)
PROBE_PORTS = {"scheduler": 8461, "brain": 8500, "hands": 8600}
#: how long a stopped process has to exit before SIGKILL
STOP_GRACE = timedelta(seconds=20)


@dataclass(frozen=True)
class Component:
    """One process of the system, as any launcher starts it."""

    name: str
    argv: tuple[str, ...]
    health: str | None = None  # an URL that answers 200 once it is ready
    env: tuple[tuple[str, str], ...] = ()  # its own variables (its probe port)


def from_table(
    served: Service, name: str, args: Sequence[str] = (), n: int = 0, *, port: int | None = None
) -> Component:
    """The service table's ``served`` as process ``name`` on this host: ``python -m`` its
    module with ``args``; ready when its readiness probe answers — on its API port
    (``port``, else the table's), or (a worker) on a probe port of its own (``port``,
    else ``PROBE_PORTS`` + ``n``)."""
    argv = (sys.executable, "-m", *served.module, *args)
    assert served.probe is not None, f"{served.name} has no probes"
    table = served.port(served.probe.port)
    if served.kind is Kind.API:
        number = port or table.number
        argv += ("--port", str(number))
        return Component(name, argv, health=f"http://127.0.0.1:{number}{served.probe.ready}")
    local = port or PROBE_PORTS[served.name] + n
    ready = f"http://127.0.0.1:{local}{served.probe.ready}"
    return Component(name, argv, health=ready, env=((table.variable, str(local)),))


class Fleet:
    """The system's processes, by name: started, signalled, restarted, stopped."""

    def __init__(
        self,
        work: Path,
        env: Mapping[str, str],
        components: Mapping[str, Sequence[str]] | Iterable[Component],
        *,
        detached: bool = False,
    ) -> None:
        self.work = work
        self.env = dict(env)
        self.detached = detached
        if isinstance(components, Mapping):
            components = [Component(name, tuple(argv)) for name, argv in components.items()]
        self.components = {component.name: component for component in components}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def argv(self) -> dict[str, list[str]]:
        return {name: list(c.argv) for name, c in self.components.items()}

    def log(self, name: str) -> Path:
        return self.work / "logs" / f"{name}.log" if self.detached else self.work / f"{name}.log"

    def pidfile(self, name: str) -> Path:
        return self.work / "run" / f"{name}.pid"

    def environment(self, name: str, **extra: str) -> dict[str, str]:
        """``name``'s environment: the fleet's, its own variables, ``extra``, and NATS as
        its role only."""
        return role_env(self.env | dict(self.components[name].env) | extra, name)

    # -- attached ----------------------------------------------------------------------

    def start(self, name: str, **extra: str) -> subprocess.Popen[bytes]:
        """Start (or restart) ``name`` as a child; ``extra`` is added to its environment
        this time."""
        assert not self.detached, "a detached fleet starts with ensure()"
        self.log(name).parent.mkdir(parents=True, exist_ok=True)
        with self.log(name).open("ab") as log:
            self.processes[name] = subprocess.Popen(
                self.components[name].argv,
                env=self.environment(name, **extra),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.processes[name]

    async def run(self, name: str, **extra: str) -> int:
        """Start ``name`` and wait for it to end; its exit status."""
        process = self.start(name, **extra)
        return await asyncio.to_thread(process.wait)

    async def address(self, name: str, *, marker: str = "listening on", within: float = 30) -> str:
        """What ``name`` printed after ``marker`` (a server's URL), once it did."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for line in self.log(name).read_text(errors="replace").splitlines():
                if marker in line:
                    return line.split(marker, 1)[1].strip()
            if self.processes[name].poll() is not None:
                break
            await asyncio.sleep(0.05)
        raise SystemExit(f"{name} did not start:\n{self.tail(name)}")

    def tail(self, name: str) -> str:
        return log_tail(self.log(name))

    def signal(self, name: str, signum: int) -> None:
        process = self.processes[name]
        if process.poll() is None:
            process.send_signal(signum)

    def kill(self, name: str) -> None:
        self.signal(name, signal.SIGKILL)
        self.processes[name].wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=STOP_GRACE.total_seconds())
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    # -- detached ----------------------------------------------------------------------

    def ensure(self) -> list[str]:
        """Start every component not running (by its pidfile); the names started."""
        assert self.detached, "an attached fleet starts with start()"
        for sub in ("logs", "run"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        started = []
        for name, component in self.components.items():
            record = read_pidfile(self.pidfile(name))
            if record is not None and is_running(record):
                continue
            spawned = spawn(component.argv, log_path=self.log(name), env=self.environment(name))
            write_pidfile(self.pidfile(name), spawned)
            started.append(name)
        return started

    def retire(self) -> list[str]:
        """Stop the detached processes of this work directory that are not components
        (scaling down: brain-N, hands-N beyond the numbers asked for)."""
        retired = []
        for pidfile in sorted((self.work / "run").glob("*.pid")):
            if pidfile.stem not in self.components:
                record = read_pidfile(pidfile)
                if record is not None:
                    stop(record, timeout=STOP_GRACE)
                remove_pidfile(pidfile)
                retired.append(pidfile.stem)
        return retired

    def stop_detached(self) -> dict[str, Stopped]:
        """SIGTERM every detached process of this work directory (SIGKILL after the
        grace), forgetting their pidfiles."""
        outcomes = {}
        for pidfile in sorted((self.work / "run").glob("*.pid")):
            record = read_pidfile(pidfile)
            if record is not None:
                outcomes[pidfile.stem] = stop(record, timeout=STOP_GRACE)
            remove_pidfile(pidfile)
        return outcomes

    def running(self) -> dict[str, int | None]:
        """Every detached process on record: its pid while it runs, else None."""
        found: dict[str, int | None] = {}
        for pidfile in sorted((self.work / "run").glob("*.pid")):
            record = read_pidfile(pidfile)
            found[pidfile.stem] = record.pid if record and is_running(record) else None
        return found

    def await_healthy(self, within: float = 60) -> None:
        """Until every component's health URL answers 200; exits naming the first that
        died or did not come up, with its log's tail."""
        deadline = time.monotonic() + within
        for name, component in self.components.items():
            if component.health is None:
                continue
            while not _answers(component.health):
                if not self._alive(name) or time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not come up:\n{self.tail(name)}")
                time.sleep(0.2)

    def _alive(self, name: str) -> bool:
        if not self.detached:
            return name in self.processes and self.processes[name].poll() is None
        record = read_pidfile(self.pidfile(name))
        return record is not None and is_running(record)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


async def until_up(url: str) -> None:
    """Wait (up to a minute) until ``url`` answers 200."""
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=1) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise SystemExit(f"{url} did not answer")
