"""The readers-writer lock that lets tests run side by side (tests/support/turns.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from tests.support.turns import Turns


def _hold(
    turn: Callable[[], AbstractContextManager[None]], events: list[str], name: str, seconds: float
) -> threading.Thread:
    def run() -> None:
        with turn():
            events.append(f"{name}+")
            time.sleep(seconds)
            events.append(f"{name}-")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_shared_turns_overlap_and_an_exclusive_one_runs_alone(tmp_path: Path) -> None:
    turns = Turns(tmp_path)
    events: list[str] = []
    first = _hold(turns.shared, events, "a", 0.4)
    second = _hold(turns.shared, events, "b", 0.4)
    time.sleep(0.1)
    alone = _hold(turns.exclusive, events, "x", 0.2)
    time.sleep(0.1)
    late = _hold(turns.shared, events, "c", 0.1)  # starts after x asked: waits behind it
    for thread in (first, second, alone, late):
        thread.join(5)
    assert set(events[:2]) == {"a+", "b+"}  # the two shared turns overlapped
    x = events.index("x+")
    assert {"a-", "b-"} <= set(events[:x])  # x waited for both
    assert events[x + 1] == "x-"  # and nothing ran beside it
    assert events.index("c+") > x + 1  # c did not overtake the waiting x
