"""The store's clock: the one time every service of a deployment shares.

Invariant 17: a deadline one host writes is never compared with another host's wall
clock. Every service reaches the Session Store, so the times one service writes for
another to judge — an operation attempt's deadline, a question's deadline, a task's
sleep — are written and read on the store's clock, never on a host's:

=============  ==========================================================================
backend        the store's time
=============  ==========================================================================
S3, DynamoDB   the server's: every response carries a ``Date`` header (whole seconds).
               Each one received bounds the server's time from below (``date + time
               since it arrived``, on this process's monotonic clock); the clock keeps
               the best bound seen, so it is never ahead of the server and, once some
               response arrived just after a second began, less than a round trip behind
SQLite         the machine's: the store is one file on one host. Its processes share an
               anchor written once per boot into the file (the wall clock of the first
               process to open it, and the boot-time clock then), so a process whose own
               wall clock is stepped or skewed still reads the same time as the others
=============  ==========================================================================

Between responses the time advances on this process's monotonic clock; ``fresh``
asks the store again when nothing has told the time for ``refresh_after``. What one
host writes for another on this clock may be off by at most ``resolution`` (plus a round
trip): the operation lifecycle's takeover margin covers that (``lifecycle.decision``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

log = logging.getLogger(__name__)

#: how long a clock goes on the monotonic clock alone before ``fresh`` asks the store
REFRESH_AFTER = timedelta(minutes=5)


class StoreClock(Protocol):
    """The store's time, as this process knows it."""

    #: how far this clock's reading may be behind the store's own (``Date`` headers
    #: count whole seconds)
    resolution: timedelta

    def now(self) -> datetime:
        """The store's time now (never ahead of it)."""
        ...

    async def fresh(self) -> datetime:
        """``now``, after asking the store when nothing told its time for a while."""
        ...


def _monotonic() -> float:
    return time.monotonic()


class ServerClock:
    """The clock of a store behind HTTP (S3, DynamoDB): the server's ``Date`` headers.

    ``observe`` is fed each response's header; ``ask`` makes one cheap request to the
    store (its answer's header is observed like any other)."""

    resolution = timedelta(seconds=1)

    def __init__(
        self,
        ask: Callable[[], Awaitable[None]] | None = None,
        *,
        refresh_after: timedelta = REFRESH_AFTER,
        monotonic: Callable[[], float] = _monotonic,
    ) -> None:
        self._ask = ask
        self._refresh_after = refresh_after.total_seconds()
        self._monotonic = monotonic
        #: the best lower bound so far: the server's epoch seconds at ``_at`` (monotonic)
        self._epoch: float | None = None
        self._at = 0.0
        #: when a response last told the time (monotonic)
        self._told = 0.0

    def bind(self, ask: Callable[[], Awaitable[None]]) -> None:
        """How to make the store answer (set once its client exists)."""
        self._ask = ask

    def observe_header(self, value: str | None) -> None:
        """A response's ``Date`` header, received just now; malformed ones are ignored."""
        if not value:
            return
        try:
            date = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return
        if date.tzinfo is None:
            date = date.replace(tzinfo=UTC)
        self.observe(date.timestamp(), self._monotonic())

    def observe(self, epoch: float, at: float) -> None:
        """The server's time was at least ``epoch`` when this process read ``at`` on
        its monotonic clock."""
        self._told = max(self._told, at)
        if self._epoch is None:
            self._epoch, self._at = epoch, at
            return
        known = self._epoch + (at - self._at)
        if epoch > known:
            self._epoch, self._at = epoch, at  # a tighter bound
        elif known > epoch + self.resolution.total_seconds():
            # Ahead of anything the server can have meant (its time is under ``epoch``
            # plus the resolution): its clock went back (an operator or NTP stepped it),
            # or this host's monotonic clock ran fast since the bound was taken. Follow
            # the server, or this clock would judge deadlines early.
            if known - epoch > 2 * self.resolution.total_seconds():
                log.warning("the store's clock went back by %.1f s; following it", known - epoch)
            self._epoch, self._at = epoch, at

    def now(self) -> datetime:
        if self._epoch is None:
            raise RuntimeError("the store's clock has not been read yet: await fresh() first")
        epoch = self._epoch + (self._monotonic() - self._at)
        return datetime.fromtimestamp(epoch, UTC)

    async def fresh(self) -> datetime:
        stale = self._monotonic() - self._told > self._refresh_after
        if (self._epoch is None or stale) and self._ask is not None:
            await self._ask()
        return self.now()


class MachineClock:
    """The clock of a store that is one file on this host (SQLite): the machine's.

    ``anchor`` is the store's per-boot anchor — a wall-clock epoch and the boot-time
    clock when it was taken — shared by every process that opens the file; a clock
    without one (a read-only store nobody has written to this boot) reads the wall
    clock of this process."""

    resolution = timedelta(0)

    def __init__(self, anchor: tuple[float, float] | None = None) -> None:
        self._anchor = anchor

    def now(self) -> datetime:
        if self._anchor is None:
            return datetime.now(UTC)
        epoch, since = self._anchor
        return datetime.fromtimestamp(epoch + (boot_seconds() - since), UTC)

    async def fresh(self) -> datetime:
        return self.now()


def boot_seconds() -> float:
    """Seconds since this machine booted, counting suspends: one clock for every process
    of the machine, which no process's wall clock (stepped, or skewed for one process)
    changes. Where there is none, this process's monotonic clock."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def boot_id() -> str | None:
    """This machine's boot: the kernel's random boot id (the anchor of a ``MachineClock``
    is kept per boot, since the boot-time clock starts again at 0). None where the
    kernel tells none: the store's clock is then this process's wall clock."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as file:
            return file.read().strip() or None
    except OSError:
        return None
