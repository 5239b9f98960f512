"""Installing Debian packages a dev service needs, the first time it starts.

``apt-get`` non-interactively, its output appended to the service's log. One install at
a time on the machine (a file lock): the services start concurrently, and two ``apt-get``
runs would fight over dpkg's and the package lists' locks.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bh.devstack import binaries
from bh.devstack.errors import DevstackError
from bh.devstack.process import Argv, log_tail

_TIMEOUT_S = 900
_LOCK = Path(tempfile.gettempdir()) / "bh-dev-apt.lock"


def install(packages: Sequence[str], log: Path, *, skip_hint: str, recommends: bool = True) -> None:
    """``apt-get update`` then ``apt-get install -y packages`` (with the packages they
    recommend unless not ``recommends``), as root; ``skip_hint`` ends the message when
    that cannot be done (how to do without the service)."""
    if os.geteuid() != 0:
        raise DevstackError(
            f"{' '.join(packages)} missing and only root can install them: "
            f"apt-get install {' '.join(packages)} ({skip_hint})"
        )
    apt_get = shutil.which("apt-get", path=binaries.system_path())
    if apt_get is None:
        raise DevstackError(f"{' '.join(packages)} missing and no apt-get ({skip_hint})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait_for_lock = ("-o", "DPkg::Lock::Timeout=300")
    lean = () if recommends else ("--no-install-recommends",)
    log.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for argv in (
            (apt_get, *wait_for_lock, "update"),
            (apt_get, *wait_for_lock, "install", "-y", *lean, *packages),
        ):
            _run_logged(argv, log, env)


def _run_logged(argv: Argv, log: Path, env: dict[str, str]) -> None:
    with log.open("a") as out:
        out.write(f"--- bh dev: running {shlex.join(argv)}\n")
        out.flush()
        try:
            code = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=_TIMEOUT_S,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    if code != 0:
        raise DevstackError(
            f"`{shlex.join(argv)}` failed (exit {code}); last lines of {log}:\n{log_tail(log)}"
        )
