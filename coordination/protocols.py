"""The two boundaries: who may drive a session now (leases), and which sessions may have
runnable work (wakes)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from contracts import LeaseLost
from contracts.model import Frozen


class Lease(Frozen):
    """The right of ``holder`` to drive ``session_id``, with the fence it must present to
    the store; it lapses unless extended before ``ttl`` passes (server time)."""

    session_id: str
    holder: str
    fence: int
    ttl: timedelta


class LeaseStore(Protocol):
    async def acquire(
        self,
        session_id: str,
        holder: str,
        *,
        ttl: timedelta,
        floor: int = 0,
        claimed: bool = False,
    ) -> Lease | None:
        """The lease with a new fence above every earlier one and above ``floor`` (the
        store's fence high-water mark), or None while another holder has it. A failed
        acquire consumes no fence. ``claimed`` (``floor`` is this holder's claim in the
        store): ``floor`` itself while nobody acquired the lease since."""
        ...

    async def extend(self, lease: Lease, *, ttl: timedelta | None = None) -> Lease:
        """Extend a lease still held by its holder; ``LeaseLost`` otherwise."""
        ...

    async def extend_many(
        self, leases: Sequence[Lease], *, ttl: timedelta
    ) -> list[Lease | LeaseLost]:
        """``extend`` of each lease together (one round trip); each lease extended or the
        ``LeaseLost`` saying why not."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Give the lease back (only its holder can); False if it had already lapsed."""
        ...

    async def holder(self, session_id: str) -> str | None: ...

    async def lapsed(self, *, limit: int = 100) -> list[str]:
        """Sessions whose lease lapsed without being released (the holder died or froze),
        each reported once across all callers."""
        ...


class WakeQueue(Protocol):
    async def check(self) -> None:
        """Raise when wakes cannot be queued now (readiness)."""
        ...

    async def wake(self, session_id: str, *, reason: str, after: timedelta | None = None) -> None:
        """Ask for a drive of ``session_id`` (now, or ``after`` from now: a duration,
        since the queue's clock is not the asker's); repeats coalesce."""
        ...
