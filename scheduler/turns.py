"""Turns: which of several schedulers does a piece of fleet-wide periodic work now.

The reconciler scans every active session of the store; with N schedulers running, N
passes per period would scan the store N times and wake every idle session N times (a
woken session on another Brain than its last holder costs a claim commit each time).
So a pass is taken in turn: ``SET <prefix>:turn:<work> <holder> NX PX <hold>`` — the
first scheduler to ask within a period does the work, the others skip it. A turn is
never released early: it lapses, so when its holder dies the next one to ask after
``hold`` takes over. A scheduler that just started claims the turn outright and does
its first pass at once (it may have been restarted because something was lost).
A count of a piece of work (``count``: ``INCR <prefix>:turn:<work>:count``) tells
which round of it this is across all schedulers, whatever their clocks.
Redis errors become ``StoreUnavailable`` here and nowhere else.
"""

from __future__ import annotations

from datetime import timedelta

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts import InvalidInput, StoreUnavailable


class Turns:
    """Turns of periodic work under ``prefix``, on a ``redis.asyncio.Redis`` owned (and
    closed) by the caller."""

    def __init__(self, client: Redis, *, prefix: str = "bh") -> None:
        self._client = client
        self._prefix = prefix

    def key(self, work: str) -> str:
        return f"{self._prefix}:turn:{work}"

    async def take(self, work: str, holder: str, *, hold: timedelta) -> bool:
        """True if ``holder`` may do ``work`` now: nobody took it within the last
        ``hold``. The turn then belongs to ``holder`` for ``hold``."""
        return await self._set(work, holder, hold, only_if_free=True)

    async def claim(self, work: str, holder: str, *, hold: timedelta) -> None:
        """Take the turn whoever has it (a scheduler just started does its first pass
        at once): the others skip theirs for ``hold``."""
        await self._set(work, holder, hold, only_if_free=False)

    async def count(self, work: str) -> int:
        """The next round of ``work`` across all schedulers: 1, 2, 3... (from 1 again
        after Redis lost its data)."""
        try:
            return int(await self._client.incr(f"{self.key(work)}:count"))
        except (RedisError, OSError) as error:
            raise StoreUnavailable(
                f"Redis failed to count the {work} rounds: {type(error).__name__}: {error}",
                work=work,
            ) from error

    async def _set(self, work: str, holder: str, hold: timedelta, *, only_if_free: bool) -> bool:
        millis = int(hold.total_seconds() * 1000)
        if millis < 1:
            raise InvalidInput(f"a turn must be held for at least 1 ms, got {hold}", work=work)
        try:
            taken = await self._client.set(self.key(work), holder, nx=only_if_free, px=millis)
        except (RedisError, OSError) as error:
            raise StoreUnavailable(
                f"Redis failed to give out the {work} turn: {type(error).__name__}: {error}",
                work=work,
            ) from error
        return bool(taken)
