"""Named moments where a process may die, and a switch to die at one of them.

The kernel calls ``reached(name)`` after every commit and before and after every
external call. Normally this only counts. Crash tests and the demo set ``BH_CRASH_AT``
to make the process SIGKILL itself at exactly one point, either the n-th point overall
(``"17"``) or the n-th occurrence of a name (``"call:after:send_email#4"``), and
``BH_CRASH_TRACE`` to record every point a clean run passes, so tests can enumerate
them deterministically. ``BH_STOP_AT`` (same syntax) makes it SIGSTOP itself there
instead: a process paused at exactly that moment, for as long as whoever watches it
(the chaos harness) decides, then resumed with SIGCONT.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path


class CrashPoints:
    def __init__(
        self, *, crash_at: str | None = None, stop_at: str | None = None, trace: Path | None = None
    ) -> None:
        self._crash_at = crash_at or None
        self._stop_at = stop_at or None
        self._trace = trace
        self._total = 0
        self._seen: Counter[str] = Counter()

    @classmethod
    def from_env(cls) -> CrashPoints:
        trace = os.environ.get("BH_CRASH_TRACE")
        return cls(
            crash_at=os.environ.get("BH_CRASH_AT"),
            stop_at=os.environ.get("BH_STOP_AT"),
            trace=Path(trace) if trace else None,
        )

    def reached(self, name: str) -> None:
        self._total += 1
        self._seen[name] += 1
        if self._trace is not None:
            with self._trace.open("a") as trace:
                trace.write(f"{self._total}\t{name}#{self._seen[name]}\n")
        here = (str(self._total), f"{name}#{self._seen[name]}")
        if self._crash_at is not None and self._crash_at in here:
            os.kill(os.getpid(), signal.SIGKILL)
        if self._stop_at is not None and self._stop_at in here:
            os.kill(os.getpid(), signal.SIGSTOP)  # resumed by whoever watches
