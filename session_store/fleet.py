"""The Hands fleet as each instance last described itself (``contracts.fleet``).

One item per Hands, overwritten at every beat and removed when it stops cleanly; a Hands
that died leaves its last beat, which readers show as silent, skip once it is older than
``FORGET_AFTER`` by their own clock, and which the next Hands to start removes (a
display record: dropping one decides nothing). Listing reads one partition, bounded by
``limit``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Final

from pydantic import ValidationError

from contracts.fleet import HandsBeat
from contracts.model import utcnow
from session_store.backend import Backend
from session_store.layout import HANDS_PARTITION

log = logging.getLogger(__name__)

#: a beat this much older than the reader's clock is dropped (the Hands is long gone)
FORGET_AFTER: Final = timedelta(days=1)


class Fleet:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def beat(self, beat: HandsBeat) -> None:
        await self._backend.put(HANDS_PARTITION, beat.executor, beat.model_dump_json().encode())

    async def leave(self, executor: str) -> None:
        await self._backend.delete(HANDS_PARTITION, executor)

    async def hands(self, *, limit: int = 500, now: datetime | None = None) -> list[HandsBeat]:
        """The Hands' last beats by executor id, at most ``limit``; an unreadable record
        is skipped (and logged), and so is a forgotten one."""
        return [
            beat
            for beat in await self._read(limit)
            if (now or utcnow()) - beat.beat_at <= FORGET_AFTER
        ]

    async def forget(self, *, now: datetime | None = None) -> list[str]:
        """Remove the beats older than ``FORGET_AFTER`` (a Hands does at its start)."""
        gone = [
            beat.executor
            for beat in await self._read(10_000)
            if (now or utcnow()) - beat.beat_at > FORGET_AFTER
        ]
        for executor in gone:
            await self._backend.delete(HANDS_PARTITION, executor)
        return gone

    async def _read(self, limit: int) -> list[HandsBeat]:
        found = []
        for executor, value in await self._backend.items(HANDS_PARTITION, limit=limit):
            try:
                beat = HandsBeat.model_validate_json(value)
            except ValidationError as error:
                log.warning("fleet record %s is unreadable: %s", executor, error.errors()[0])
                continue
            found.append(beat)
        return found
