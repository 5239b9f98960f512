"""Where a Hands keeps working trees on its disk, and how a run takes and returns one.

::

    <root>/trees/<session id>/         a session's idle tree, known to equal a version
        tree/  state.json  .stamp
    <root>/runs/<operation id>/        one run's directories (named by the operation, so a
        held/tree/  held/state.json    Hands that reconnects after a crash finds them)
        held/.stamp  artifacts/

A run takes its session's idle tree by renaming it into its own directory (one rename:
of two runs of one session on this Hands, one gets it and the other builds its own), and
gives it back the same way once the tree is known to equal a version again; a tree
whose state is unknown is removed. Idle trees beyond ``keep`` are removed, the least
recently returned first. Directories are the Hands' own (mode 0700); only the tree and
the artifacts directory belong to the sandbox user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from contracts.model import check_id


@dataclass(frozen=True)
class RunDirectories:
    """One run's directories."""

    root: Path

    @property
    def held(self) -> Path:
        """The tree with its state: moved as one (taken, given back)."""
        return self.root / "held"

    @property
    def tree(self) -> Path:
        return self.held / "tree"

    @property
    def state(self) -> Path:
        return self.held / "state.json"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"


class Layout:
    """The trees and runs under ``root``; at most ``keep`` idle trees."""

    def __init__(self, root: Path, *, keep: int = 16) -> None:
        self.root = root
        self.keep = keep

    def run(self, operation_id: str) -> RunDirectories:
        return RunDirectories(self.root / "runs" / check_id(operation_id, "operation id"))

    def idle(self, session_id: str) -> Path:
        return self.root / "trees" / check_id(session_id, "session id")

    def fresh(self, operation_id: str) -> RunDirectories:
        """The run's directory, emptied (what an earlier attempt left is unknown)."""
        run = self.run(operation_id)
        self.clear(operation_id)
        run.root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run.root.mkdir(mode=0o700)
        return run

    def take(self, session_id: str, operation_id: str) -> bool:
        """Move the session's idle tree into the run; whether there was one."""
        try:
            os.rename(self.idle(session_id), self.run(operation_id).held)
        except FileNotFoundError:
            return False
        return True

    def give_back(self, session_id: str, operation_id: str) -> bool:
        """Move the run's tree back as the session's idle tree (another one there
        already: this one goes); whether it was kept."""
        idle = self.idle(session_id)
        idle.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        held = self.run(operation_id).held
        try:
            os.rename(held, idle)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            return False
        os.utime(idle)  # the order in which idle trees go
        self._bound()
        return True

    def clear(self, operation_id: str) -> None:
        """Remove the run's directories, whatever is in them."""
        self._discard(self.run(operation_id).root)

    def runs(self) -> list[str]:
        """The operations with run directories here."""
        with contextlib.suppress(FileNotFoundError):
            return sorted(entry.name for entry in os.scandir(self.root / "runs"))
        return []

    def _bound(self) -> None:
        idle = []
        for tree in (self.root / "trees").iterdir():
            with contextlib.suppress(FileNotFoundError):  # taken meanwhile
                idle.append((tree.stat().st_mtime_ns, tree))
        for _, tree in sorted(idle)[: max(0, len(idle) - self.keep)]:
            self._discard(tree)

    def _discard(self, path: Path) -> None:
        """Remove ``path``: first moved aside in one rename (a run taking it at the same
        moment gets it whole, or not at all), then deleted."""
        trash = self.root / "trash"
        trash.mkdir(parents=True, exist_ok=True, mode=0o700)
        aside = trash / uuid.uuid4().hex
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        shutil.rmtree(aside, ignore_errors=True)
