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


class Attention:
    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self._client = client
        self._key = f"{prefix}:attention"
        self._epoch_key = f"{prefix}:attention:epoch"
        self._epoch: str | None = None
        self._take = client.register_script(_TAKE)
        #: members dropped as they were taken, by reason (``invalid_id``)
        self.refused: Counter[str] = Counter()

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
        if current is None:
            self._client.set(self._epoch_key, uuid.uuid4().hex, nx=True)
            current = _text(self._client.get(self._epoch_key))
        self._epoch = current
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
