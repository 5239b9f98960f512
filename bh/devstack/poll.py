"""Waiting with a deadline: the only way the dev stack waits for anything."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

POLL_INTERVAL = timedelta(milliseconds=100)


def poll_until(
    condition: Callable[[], bool],
    *,
    timeout: timedelta,
    give_up: Callable[[], bool] = lambda: False,
    interval: timedelta = POLL_INTERVAL,
) -> bool:
    """Call ``condition`` until it is true (-> True) or ``timeout`` passes (-> False).

    ``give_up`` ends the wait early, e.g. when the process being waited on has died.
    """
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        if condition():
            return True
        if give_up() or time.monotonic() >= deadline:
            return False
        time.sleep(interval.total_seconds())
