"""What a sandbox mounts for a run that mounts its session's workspace.

Two host directories, both named by the operation (``hands.workspace.layout``), so a
Hands that reconnects to the run after a crash finds the same ones: the working tree
(materialised from the call's base version) at the tool's path, ``ro`` or ``rw``, and
an empty artifacts directory at ``ARTIFACTS_MOUNT``, ``rw``. They are the only mounts a
sandbox gets (``docs/hardening.md``).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Final

from contracts.model import Frozen
from contracts.workspace import WorkspaceMode

#: where a tool finds the directory whose files become its artifacts (``BH_ARTIFACTS``)
ARTIFACTS_MOUNT: Final = "/artifacts"
#: the sandbox's own places: no workspace is mounted at or under them
RESERVED_MOUNTS: Final = ("/tmp", "/dev", "/proc", "/sys", ARTIFACTS_MOUNT)
_TARGET = re.compile(r"/[A-Za-z0-9._/-]{1,200}")


def mount_target(path: str) -> str:
    """``path`` when a workspace may be mounted there inside a sandbox; a ``ValueError``
    saying what is wrong otherwise (relative, not normal, a reserved place)."""
    if not _TARGET.fullmatch(path) or path == "/":
        raise ValueError(
            f"the workspace's path {path[:80]!r} must be absolute, 2-201 of letters, digits, "
            "'.', '_', '-', '/', and not the root"
        )
    if posixpath.normpath(path) != path or "//" in path:
        raise ValueError(
            f"the workspace's path {path[:80]!r} must be normal (no '.', '..', '//' or "
            "trailing '/')"
        )
    for reserved in RESERVED_MOUNTS:
        if path == reserved or path.startswith(reserved + "/"):
            raise ValueError(
                f"the workspace's path {path!r} is reserved: the sandbox's own places "
                f"{', '.join(RESERVED_MOUNTS)} cannot hold it"
            )
    return path


class RunMount(Frozen):
    """A run's workspace as its sandbox mounts it: the tree (a host directory) at
    ``path``, ``ro`` or ``rw``, and the artifacts directory (a host directory, empty at
    the start) at ``ARTIFACTS_MOUNT``."""

    mode: WorkspaceMode
    path: str
    tree: Path
    artifacts: Path

    @property
    def writable(self) -> bool:
        return self.mode is WorkspaceMode.WRITE

    def environment(self) -> dict[str, str]:
        """Where a sandboxed tool finds them (``BH_WORKSPACE``, ``BH_ARTIFACTS``)."""
        return {"BH_WORKSPACE": self.path, "BH_ARTIFACTS": ARTIFACTS_MOUNT}

    def host_environment(self) -> dict[str, str]:
        """Where a tool running on this host (the process sandbox) finds them."""
        return {"BH_WORKSPACE": str(self.tree), "BH_ARTIFACTS": str(self.artifacts)}
