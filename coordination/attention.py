"""The attention set: sessions the scheduler must look at again, and when.

A Brain that lets go of a session waiting on the Hands asks for attention after
``reissue_after``; the scheduler's reconciler takes the due sessions (``take``), looks at
each one's committed intents in the store, and re-issues a dispatch that no Hands
answered (lost by NATS, or never delivered), re-announces a result whose event was lost,
and asks again while intents stay open. A pass therefore costs in proportion to the
sessions that need attention, not to all active sessions.

Times are Redis's own clock (``TIME``): no clock shared between hosts is assumed. Redis
can lose the set (FLUSHALL, a failover): ``lost`` tells, by an epoch token that
disappears with it, and the scheduler then audits every active session from the store —
the store stays the source of truth; this set is only an index of it.

A member that is not a session id (anyone with the Redis password can write one) is
dropped as it is taken, counted in ``refused`` and logged once: looked at, it would fail
the same way every time.

Re-issued dispatches need ``Nats-Msg-Id``s the bus's duplicate window has not seen
(``reissue_mark``): a count per operation shared by every scheduler, kept a while after
the last re-issue, after the epoch token, so a count Redis lost starts over under a new
epoch and never repeats an id.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

import redis

from contracts import InvalidInput, StoreUnavailable
from contracts.model import check_id

log = logging.getLogger(__name__)

T = TypeVar("T")

_TAKE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do redis.call('ZREM', KEYS[1], member) end
return due
"""

# One more re-issue of an operation's dispatch, and the epoch of the data counting them
# (empty when Redis lost it: the caller makes a new one).
_COUNT = """
local count = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {count, redis.call('GET', KEYS[2]) or ''}
"""


class Attention:
    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self._client = client
        self._key = f"{prefix}:attention"
        self._epoch_key = f"{prefix}:attention:epoch"
        self._epoch: str | None = None
        self._take = client.register_script(_TAKE)
        #: members dropped as they were taken, by reason (``invalid_id``)
        self.refused: Counter[str] = Counter()
        self._count = client.register_script(_COUNT)
        self._reissues_key = f"{prefix}:attention:reissues"

    async def watch(self, session_id: str, *, after: timedelta) -> None:
        """Look at ``session_id`` again ``after`` from now (the earliest ask is kept)."""
        await self._call(self._watch, session_id, after.total_seconds())

    async def take(self, limit: int = 256) -> list[str]:
        """Up to ``limit`` sessions whose time has come, removed from the set (a member
        that is not a session id is dropped: ``session_ids``)."""
        found = await self._call(self._due, limit)
        return session_ids(found, self.refused, where="attention set")

    async def lost(self) -> bool:
        """Whether the set may have lost entries since the last call (Redis lost its
        data, or this is the first call): then audit from the store."""
        return bool(await self._call(self._lost))

    async def reissue_mark(self, operation_id: str, *, keep: timedelta) -> str:
        """A mark (``<epoch>-<count>``) that no earlier re-issue of ``operation_id``'s
        dispatch had, whichever scheduler made it. The count is kept ``keep`` after the
        last re-issue: longer than the bus's duplicate window, so a count that lapsed
        and starts over repeats only marks the window forgot."""
        return await self._call(self._mark, operation_id, keep)

    async def forget_reissues(self, operation_id: str) -> None:
        """The operation's result is in: its re-issues are over."""
        await self._call(self._client.delete, f"{self._reissues_key}:{operation_id}")

    def _mark(self, operation_id: str, keep: timedelta) -> str:
        keys = [f"{self._reissues_key}:{operation_id}", self._epoch_key]
        count, epoch = self._count(keys=keys, args=[int(keep.total_seconds() * 1000)])
        return f"{(_text(epoch) or self._new_epoch())[:12]}-{count}"

    def _new_epoch(self) -> str:
        """The epoch, made if Redis lost it (``lost`` then tells this process too)."""
        self._client.set(self._epoch_key, uuid.uuid4().hex, nx=True)
        return _text(self._client.get(self._epoch_key)) or ""

    def _now(self) -> float:
        seconds, micros = self._client.time()
        return float(seconds) + float(micros) / 1e6

    def _watch(self, session_id: str, after: float) -> None:
        self._client.zadd(self._key, {session_id: self._now() + after}, lt=True)

    def _due(self, limit: int) -> list[bytes]:
        found: list[bytes] = list(self._take(keys=[self._key], args=[self._now(), limit]))
        return found

    def _lost(self) -> bool:
        current = _text(self._client.get(self._epoch_key))
        if current is not None and current == self._epoch:
            return False
        self._epoch = current if current is not None else self._new_epoch()
        return True

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(function, *args)
        except redis.RedisError as error:
            raise StoreUnavailable(f"attention set: {error}") from None


def session_ids(members: Iterable[bytes], refused: Counter[str], *, where: str) -> list[str]:
    """The ``members`` taken from a Redis set that are session ids; each other one is
    counted in ``refused`` and logged once — it is gone from the set already, so it is
    never seen again."""
    found = []
    for member in members:
        try:
            found.append(check_id(member.decode("utf-8", "replace"), "session id"))
        except InvalidInput as error:
            refused["invalid_id"] += 1
            log.warning("dropped a member of the %s: %s", where, error.message)
    return found


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
