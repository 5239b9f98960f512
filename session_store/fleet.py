"""The Hands and schedulers as each instance last described itself (``contracts.fleet``).

One item per instance, overwritten at every beat and removed when it stops cleanly; one
that died leaves its last beat, which readers show as silent, skip once it is older than
``FORGET_AFTER`` on the store's clock (the beats are stamped on it), and which the next
instance of its kind to start removes (a display record: dropping one decides nothing).
Listing reads one partition, bounded by ``limit``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Final, Generic, TypeVar

from pydantic import ValidationError

from contracts.fleet import HandsBeat, SchedulerBeat
from session_store.backend import Backend
from session_store.layout import HANDS_PARTITION, SCHEDULERS_PARTITION

log = logging.getLogger(__name__)

B = TypeVar("B", HandsBeat, SchedulerBeat)

#: a beat this much older than the reader's clock is dropped (the Hands is long gone)
FORGET_AFTER: Final = timedelta(days=1)


class _Beats(Generic[B]):
    """The beats of one kind of instance, in one partition, keyed by ``key``."""

    def __init__(self, backend: Backend, partition: str, model: type[B], key: str) -> None:
        self._backend = backend
        self._partition = partition
        self._model: type[B] = model
        self._key = key

    async def beat(self, beat: B) -> None:
        name = str(getattr(beat, self._key))
        await self._backend.put(self._partition, name, beat.model_dump_json().encode())

    async def leave(self, name: str) -> None:
        await self._backend.delete(self._partition, name)

    async def listed(self, *, limit: int = 500, now: datetime | None = None) -> list[B]:
        """The last beats by name, at most ``limit``; an unreadable record is skipped
        (and logged), and so is a forgotten one."""
        return [
            beat
            for beat in await self._read(limit)
            if (now or self._backend.clock.now()) - beat.beat_at <= FORGET_AFTER
        ]

    async def forget(self, *, now: datetime | None = None) -> list[str]:
        """Remove the beats older than ``FORGET_AFTER`` (an instance does at its start)."""
        gone = [
            str(getattr(beat, self._key))
            for beat in await self._read(10_000)
            if (now or self._backend.clock.now()) - beat.beat_at > FORGET_AFTER
        ]
        for name in gone:
            await self._backend.delete(self._partition, name)
        return gone

    async def _read(self, limit: int) -> list[B]:
        found = []
        for name, value in await self._backend.items(self._partition, limit=limit):
            try:
                beat = self._model.model_validate_json(value)
            except ValidationError as error:
                log.warning("fleet record %s is unreadable: %s", name, error.errors()[0])
                continue
            found.append(beat)
        return found


class Fleet:
    """The Hands' beats (``beat``, ``leave``, ``hands``, ``forget``, by executor id) and
    the schedulers' (``schedulers``)."""

    def __init__(self, backend: Backend) -> None:
        self._hands = _Beats(backend, HANDS_PARTITION, HandsBeat, "executor")
        self.schedulers = _Beats(backend, SCHEDULERS_PARTITION, SchedulerBeat, "scheduler")

    async def beat(self, beat: HandsBeat) -> None:
        await self._hands.beat(beat)

    async def leave(self, executor: str) -> None:
        await self._hands.leave(executor)

    async def hands(self, *, limit: int = 500, now: datetime | None = None) -> list[HandsBeat]:
        return await self._hands.listed(limit=limit, now=now)

    async def forget(self, *, now: datetime | None = None) -> list[str]:
        return await self._hands.forget(now=now)
