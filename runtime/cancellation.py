"""Stopping asyncio tasks for sure, on a Python whose ``wait_for`` can drop a cancel.

On Python 3.11 ``asyncio.wait_for`` returns its inner result, and drops the
cancellation, when the cancel arrives in the step its inner future completes (CPython
gh-86296, fixed in 3.12). redis-py's async client runs every command's send through it
(it does whenever a socket timeout is set, and 5 s is its default) and nats-py its
requests and flushes. A loop cancelled inside such a call then runs on as if nothing had
happened, and whoever cancelled it once and waits for it waits forever: a scheduler,
Brain or Hands shutdown that never ends. ``cancel_and_wait`` cancels again while the task
runs, and gives up (with a warning) after a grace period rather than hang.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

#: how often a task still running is cancelled again
_RECANCEL_EVERY_S = 0.05


async def cancel_and_wait(*tasks: asyncio.Future[Any], within: float = 10.0) -> list[BaseException]:
    """Cancel ``tasks`` and wait until each has ended, cancelling again every 50 ms
    while one still runs; after ``within`` seconds log the ones left and return. The
    errors the ended tasks raised (other than their cancellation), for the caller to
    raise or log: the caller is stopping, and decides."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        wait = min(_RECANCEL_EVERY_S, max(0.0, deadline - loop.time()))
        _, pending = await asyncio.wait(pending, timeout=wait)
        if pending and loop.time() >= deadline:
            log.warning(
                "%d task(s) still running %.1f s after being cancelled: %s",
                len(pending),
                within,
                ", ".join(sorted(_name(task) for task in pending)),
            )
            break
    return [
        error
        for task in tasks
        if task.done() and not task.cancelled() and (error := task.exception()) is not None
    ]


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
