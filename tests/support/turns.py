"""Turns for tests run side by side (pytest-xdist): most tests share the dev services
freely; a test marked ``exclusive`` restarts one of them (NATS, the Docker engine) and
runs while no other test runs.

A readers-writer lock over two ``flock`` files in a directory of the run: ``shared``
holds the gate's lock in shared mode; ``exclusive`` first takes the turnstile, so tests
that start after it wait behind it instead of starving it, then the gate in exclusive
mode. The kernel drops a dead worker's locks with its descriptors.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Turns:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._turnstile = directory / "turnstile.lock"
        self._gate = directory / "gate.lock"

    @contextmanager
    def shared(self) -> Iterator[None]:
        with _locked(self._turnstile, fcntl.LOCK_EX):
            pass  # wait behind an exclusive test that is waiting or running
        with _locked(self._gate, fcntl.LOCK_SH):
            yield

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with _locked(self._turnstile, fcntl.LOCK_EX), _locked(self._gate, fcntl.LOCK_EX):
            yield


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
