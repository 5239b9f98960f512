"""A fleet of system processes started by name, each signalled, killed and restarted by
the chaos harness, the demo and the benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from pathlib import Path

import httpx

from bh.devstack.auth import role_env


class Fleet:
    """The system's processes, by name, each restartable."""

    def __init__(self, work: Path, env: dict[str, str], argv: dict[str, list[str]]) -> None:
        self.work = work
        self.env = env
        self.argv = argv
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, **extra: str) -> subprocess.Popen[bytes]:
        """Start (or restart) ``name``; ``extra`` is added to its environment this time.
        It connects to NATS as its role (``bh.devstack.auth.role_env``)."""
        with (self.work / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                self.argv[name],
                env={**role_env(self.env, name), **extra},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.processes[name]

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
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
