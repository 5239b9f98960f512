"""Poll with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def assert_eventually(
    check: Callable[[], Awaitable[bool]],
    *,
    within: float = 10.0,
    interval: float = 0.02,
    said: Callable[[], str] | None = None,
) -> None:
    """Wait until ``check`` holds; ``said`` tells what the failure message shows of the
    state the check read."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            found = f" ({said()})" if said is not None else ""
            raise AssertionError(f"condition not met within {within}s: {check}{found}")
        await asyncio.sleep(interval)
