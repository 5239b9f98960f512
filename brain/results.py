"""Waiting for the Hands' results of one session's operations, without polling blindly.

Listens on the session's results subject; an event is a hint that the store now holds a
result, and the runner's next drive reads the truth from the store. Events can be lost
(a reconnect, a restart), so waiting is also bounded by a timeout after which the
runner looks at the store anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nats.aio.msg import Msg

from bus import Bus, result_subject


class ResultWaiter:
    def __init__(self, bus: Bus, session_id: str) -> None:
        self._bus = bus
        self._session_id = session_id
        self._arrived = asyncio.Event()
        self._subscription: Any = None

    async def __aenter__(self) -> ResultWaiter:
        self._subscription = await self._bus.listen(result_subject(self._session_id), self._on)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()

    async def _on(self, _message: Msg) -> None:
        self._arrived.set()

    def clear(self) -> None:
        """Forget earlier events: call before looking at the store."""
        self._arrived.clear()

    async def wait(self, seconds: float) -> bool:
        """True when a result event arrived (since ``clear``) within ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                await self._arrived.wait()
        except TimeoutError:
            return False
        return True
