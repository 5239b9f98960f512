"""The state directory: logs, pidfiles, the env file and the lock that serialises commands."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StateDir:
    """``<root>/logs/<service>.log``, ``<root>/run/<service>.pid``, ``<root>/env``."""

    root: Path

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    def log(self, service: str) -> Path:
        return self.root / "logs" / f"{service}.log"

    def pidfile(self, service: str) -> Path:
        return self.root / "run" / f"{service}.pid"

    @property
    def secrets(self) -> Path:
        """The bus credentials and the configs holding them (0700; files 0600)."""
        return self.root / "secrets"

    def data(self, service: str) -> Path:
        """A scratch directory a service may write into (redis --dir, nats --store_dir)."""
        path = self.root / "data" / service
        path.mkdir(parents=True, exist_ok=True)
        return path

    def create(self) -> None:
        for sub in ("logs", "run", "data"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock so two ``up``/``down`` runs never race on one pidfile."""
        self.create()
        with (self.root / "run" / "lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
