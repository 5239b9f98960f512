"""Poll with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def assert_eventually(
    check: Callable[[], Awaitable[bool]], *, within: float = 10.0, interval: float = 0.02
) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s: {check}")
        await asyncio.sleep(interval)
