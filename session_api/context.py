"""What the API's routes work with: one instance per app, handed to its router."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from coordination import WakeQueue
from session_api.stream import StreamSettings, StreamSlots
from session_store import SessionStore
from session_store.submissions import SessionClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiContext:
    store: SessionStore
    #: None: nothing wakes a Brain (the scheduler's reconciler finds the work later)
    wakes: WakeQueue | None
    streams: StreamSettings
    #: a wake that takes longer is abandoned (and logged): the input is already stored
    wake_timeout: timedelta
    #: at most this many sessions in ``GET /v1/sessions``
    list_limit: int
    client: SessionClient = field(init=False)
    #: set when the server stops: open event streams end at once
    stopping: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    #: the event streams open now, within ``streams``' caps
    slots: StreamSlots = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "client", SessionClient(self.store))
        object.__setattr__(self, "slots", StreamSlots(self.streams))

    async def wake(self, session_id: str, reason: str) -> None:
        """Ask for a drive of the session; a failure is logged, not raised."""
        if self.wakes is None:
            return
        try:
            async with asyncio.timeout(self.wake_timeout.total_seconds()):
                await self.wakes.wake(session_id, reason=reason)
        except Exception as error:
            # The input is committed (persist, then adopt): failing the request now
            # would only make the client retry. The reconciler re-issues lost wakes.
            log.warning(
                "session %s: wake (%s) failed: %r; the reconciler will find the work",
                session_id,
                reason,
                error,
            )
