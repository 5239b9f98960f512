"""The Docker engine: install ``docker.io`` when missing, run ``dockerd``, probe its socket.

dockerd is started with its default storage driver first; where that cannot work (e.g.
overlayfs inside an overlayfs container) the stack retries with ``--storage-driver=vfs``,
which is slow but works everywhere. Only root may install or start it; otherwise the
failure says so and what to run instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from bh.devstack import apt, binaries, probe
from bh.devstack.config import DevConfig
from bh.devstack.errors import DevstackError
from bh.devstack.process import Argv, runs
from bh.devstack.service import Service
from bh.devstack.state import StateDir

VFS_FALLBACK = "--storage-driver=vfs"
_SKIP_HINT = "or skip it with `bh dev up --without docker`"
#: the pid files dockerd writes by default, each with the program it names: dockerd will
#: not start while its own exists, nor while the containerd it started looks alive
ENGINE_PIDFILES = (
    (Path("/var/run/docker.pid"), "dockerd"),
    (Path("/var/run/docker/containerd/containerd.pid"), "containerd"),
)


def service(config: DevConfig, state: StateDir, say: Callable[[str], None]) -> Service:
    """The Docker engine as a dev service, listening on ``config.docker_socket``."""
    socket = config.docker_socket
    log = state.log("docker")
    return Service(
        name="docker",
        address=f"unix://{socket}",
        ports=(),
        launches=lambda: launches(socket),
        ready=lambda: is_up(socket),
        exports={"DOCKER_HOST": f"unix://{socket}"},
        log_path=log,
        pid_path=state.pidfile("docker"),
        ready_timeout=timedelta(seconds=60),
        stop_timeout=timedelta(seconds=30),
        prepare=lambda: prepare(log, say),
        detail=lambda: f"storage driver {storage_driver(socket) or '?'}",
        child_env={"PATH": binaries.system_path()},
    )


def is_up(socket: Path) -> bool:
    """True if a Docker engine answers ``/_ping`` on ``socket`` (what `docker info` needs)."""
    return probe.unix_http_status(socket, "/_ping") == 200


def storage_driver(socket: Path) -> str | None:
    info = probe.unix_http_json(socket, "/info")
    return str(info["Driver"]) if isinstance(info, dict) and "Driver" in info else None


def launches(socket: Path) -> tuple[Argv, ...]:
    """dockerd with the default storage driver, then the vfs fallback."""
    dockerd = binaries.dockerd()
    if dockerd is None:
        raise DevstackError(f"dockerd not found: install docker.io ({_SKIP_HINT})")
    # The default socket needs no --host flag, which would clash with a daemon.json "hosts".
    host = () if socket == Path("/var/run/docker.sock") else (f"--host=unix://{socket}",)
    base = (str(dockerd), *host)
    return (base, (*base, VFS_FALLBACK))


def prepare(log: Path, say: Callable[[str], None]) -> None:
    """Install docker.io if dockerd is missing; make sure we may start it."""
    if os.geteuid() != 0:
        raise DevstackError(
            "the Docker engine is not running and only root can install or start dockerd: "
            f"start it yourself (e.g. `sudo systemctl start docker`) {_SKIP_HINT}"
        )
    for pidfile, program in ENGINE_PIDFILES:
        if clear_stale_pidfile(pidfile, program):
            say(f"docker: removed {pidfile}, left by a {program} that is gone")
    if binaries.dockerd() is None:
        say(f"docker: dockerd missing, installing docker.io with apt-get (output in {log})")
        install_docker_io(log)


def clear_stale_pidfile(path: Path, program: str) -> bool:
    """Remove a pid file of the engine when no ``program`` runs under its pid (the engine
    died with its machine or was SIGKILLed; the pid may name another process by now):
    dockerd refuses to start over such a file, or waits for a containerd that is not
    there. True if it was removed."""
    try:
        pid = int(path.read_text().strip())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        pid = 0
    if pid > 0 and runs(pid, program):
        return False
    path.unlink(missing_ok=True)
    return True


def install_docker_io(log: Path) -> None:
    """``apt-get install docker.io`` non-interactively, its output appended to ``log``."""
    apt.install(("docker.io",), log, skip_hint=_SKIP_HINT)
    if binaries.dockerd() is None:
        raise DevstackError(f"docker.io was installed but dockerd is still missing; see {log}")
