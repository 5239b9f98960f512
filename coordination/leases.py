"""Fenced session leases in Redis: the ``LeaseStore`` the scheduler and Brains share.

Two keys per session, and one watch list, under a configurable prefix (default ``bh``)::

    <prefix>:lease:<session>   "holder|fence"   server-side PX TTL
    <prefix>:fence:<session>   fence counter    no TTL
    <prefix>:leases:held       sorted set: session → when its lease lapses (server ms)
    <prefix>:wake:timer        the scheduler's timer signal (``coordination.timer``)

The watch list lets the scheduler wake a session as soon as its lease lapsed without
being released — its holder died or froze — instead of at the next reconciler pass.

Each operation is one Lua script, so Redis runs it atomically. A lease is only a hint
about who should drive a session: the Session Store's claim commit is what stops a
stale holder (see ``docs/leases.md``). Redis errors are translated into
``StoreUnavailable`` here and nowhere else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts.errors import InvalidInput, LeaseLost, StoreUnavailable
from coordination.protocols import Lease
from coordination.timer import LONGEST_WAIT, timer_key

# Server time in ms: leases and their watch list use Redis's clock only, never a host's.
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: lease, counter, watch, timer. ARGV: holder, ttl ms, floor, session, the
# scheduler's longest wait in ms (a new lease lapsing sooner signals its timer:
# ``coordination.timer``), "1" when the store's fence ``floor`` was claimed by this
# holder. Another holder's lease → nil, and the counter is not touched: a failed
# acquire consumes no fence. The same holder keeps its fence unless the store has
# already seen a higher one (floor), in which case its old fence could never claim
# again. With no lease, the claimant of ``floor`` gets ``floor`` back while the counter
# still stands at it (no acquire since, by anyone): it holds the session in the store
# already, so it writes no new claim.
# Counters are set via SET + INCR rather than from a Lua number, because Lua numbers
# are doubles and would be written in exponent notation past 1e14.
_ACQUIRE = (
    _NOW
    + """
local lease, counter = KEYS[1], KEYS[2]
local holder, ttl, floor = ARGV[1], ARGV[2], tonumber(ARGV[3])
local current = redis.call('GET', lease)
if current then
  local cut = string.find(current, '|[^|]*$')
  if string.sub(current, 1, cut - 1) ~= holder then
    return false
  end
  local held = tonumber(string.sub(current, cut + 1))
  if held >= floor then
    redis.call('PEXPIRE', lease, ttl)
    redis.call('ZADD', KEYS[3], now + tonumber(ttl), ARGV[4])
    return held
  end
end
local fence
if not current and ARGV[6] == '1' and tonumber(redis.call('GET', counter)) == floor then
  fence = floor
else
  fence = redis.call('INCR', counter)
  if fence <= floor then
    redis.call('SET', counter, ARGV[3])
    fence = redis.call('INCR', counter)
  end
end
redis.call('SET', lease, holder .. '|' .. string.format('%d', fence), 'PX', ttl)
redis.call('ZADD', KEYS[3], now + tonumber(ttl), ARGV[4])
if tonumber(ttl) < tonumber(ARGV[5]) then
  redis.call('LPUSH', KEYS[4], 1)
  redis.call('LTRIM', KEYS[4], 0, 0)
end
return fence
"""
)

# KEYS: lease, watch. ARGV: "holder|fence", ttl ms, session. Returns what the key held
# (nil if lapsed); it was extended exactly when that equals ARGV[1].
_EXTEND = (
    _NOW
    + """
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
end
return current
"""
)

# KEYS: lease, watch. ARGV: "holder|fence", session. 1 if this lease was deleted.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: watch. ARGV: lease key prefix, limit. Sessions whose lease lapsed unreleased,
# each taken off the list (so reported once, whoever asks); a session whose lease is
# held again (a new holder) is kept, with its new lapse time.
_LAPSED = (
    _NOW
    + """
local found = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, session in ipairs(due) do
  local left = redis.call('PTTL', ARGV[1] .. session)
  if left > 0 then
    redis.call('ZADD', KEYS[1], now + left, session)
  else
    redis.call('ZREM', KEYS[1], session)
    table.insert(found, session)
  end
end
return found
"""
)

_MAX_FENCE = 2**53  # exact in a Lua double

#: a proof this close to its end proves nothing: what may happen between a check and the
#: action it guards (the event loop's own latency), as a share of the TTL and at most 1 s
_MARGIN_SHARE = 0.1
_MARGIN_MAX_S = 1.0


class LeaseProof:
    """Until when this process can *prove* it holds a lease, on its own monotonic clock.

    Redis starts a lease's TTL when it runs the acquire or extend, which is after the
    request left here; so a lease whose last successful acquire or extend was *sent* at
    monotonic time ``t`` is held at least until ``t + ttl`` — whatever happened since
    (a pause, a lost reply, a blip). Only this host's monotonic clock is read; no clock
    is compared with another host's or with Redis's (it assumes clocks run at the same
    rate, which the ``margin`` also covers). ``prove`` is checked before every side
    effect: a holder that cannot prove its lease for ``margin`` more starts nothing.
    """

    def __init__(
        self, lease: Lease, sent_at: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lease = lease
        self.until = sent_at + lease.ttl.total_seconds()
        self._clock = clock
        self.margin = min(lease.ttl.total_seconds() * _MARGIN_SHARE, _MARGIN_MAX_S)

    def renewed(self, lease: Lease, sent_at: float) -> None:
        """``lease`` was extended by a request sent at ``sent_at``."""
        self.lease = lease
        self.until = max(self.until, sent_at + lease.ttl.total_seconds())

    def remaining(self) -> float:
        """Seconds the lease is still provably held (negative: it may have lapsed)."""
        return self.until - self._clock()

    @property
    def proven(self) -> bool:
        return self.remaining() > self.margin

    def prove(self, action: str) -> None:
        """``LeaseLost`` unless the lease is provably held for ``margin`` more: ``action``
        (a side effect) must not start."""
        if self.proven:
            return
        lease = self.lease
        raise LeaseLost(
            f"{action} not started: the lease on session {lease.session_id} for "
            f"{lease.holder} at fence {lease.fence} is not provably held any more "
            f"({self.remaining():.3f} s left, margin {self.margin:.3f} s)",
            session_id=lease.session_id,
            holder=lease.holder,
            fence=lease.fence,
        )


class RedisLeases:
    """``LeaseStore`` on Redis.

    ``client`` is a ``redis.asyncio.Redis`` owned by the caller, who closes it; this
    class never does. It works with ``decode_responses`` on or off. ``prefix`` keeps
    deployments (and test runs) sharing one Redis apart. ``keeping``, when given, is the
    client extensions go through (its own few connections): a lease being kept never
    waits for a connection behind a burst of acquisitions on ``client``'s pool.
    """

    def __init__(self, client: Redis, *, prefix: str = "bh", keeping: Redis | None = None) -> None:
        if not prefix or any(c.isspace() for c in prefix):
            raise InvalidInput(
                f"lease key prefix must be non-empty without whitespace, got {prefix!r}",
                prefix=prefix,
            )
        self._client = client
        self._prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._keeping = keeping or client
        self._extend = self._keeping.register_script(_EXTEND)
        self._release = client.register_script(_RELEASE)
        self._lapsed = client.register_script(_LAPSED)

    @property
    def prefix(self) -> str:
        return self._prefix

    def lease_key(self, session_id: str) -> str:
        return f"{self._prefix}:lease:{session_id}"

    def fence_key(self, session_id: str) -> str:
        return f"{self._prefix}:fence:{session_id}"

    @property
    def watch_key(self) -> str:
        return f"{self._prefix}:leases:held"

    async def acquire(
        self,
        session_id: str,
        holder: str,
        *,
        ttl: timedelta,
        floor: int = 0,
        claimed: bool = False,
    ) -> Lease | None:
        """The lease with a fence above every earlier one and above ``floor``, or None
        while another holder has it (the counter is then untouched). A holder that still
        holds the lease keeps its fence (and gets ``ttl`` from now) unless that fence is
        below ``floor``. ``claimed``: the store's fence ``floor`` is this holder's claim;
        it gets ``floor`` back if nobody acquired the lease since."""
        _check_names(session_id, holder)
        if not 0 <= floor < _MAX_FENCE:
            raise InvalidInput(
                f"fence floor must be between 0 and 2**53 - 1, got {floor}", floor=floor
            )
        keys = [
            self.lease_key(session_id),
            self.fence_key(session_id),
            self.watch_key,
            timer_key(self._prefix),
        ]
        args: list[str | int] = [
            holder,
            _millis(ttl),
            floor,
            session_id,
            int(LONGEST_WAIT * 1000),
            "1" if claimed and floor > 0 else "0",
        ]
        with _translated("acquire", session_id):
            fence = await self._acquire(keys=keys, args=args)
        if fence is None:
            return None
        return Lease(session_id=session_id, holder=holder, fence=int(fence), ttl=ttl)

    async def extend(self, lease: Lease, *, ttl: timedelta | None = None) -> Lease:
        """Give ``lease`` ``ttl`` (default: its own) from now, if Redis still holds exactly
        this holder and fence; ``LeaseLost`` otherwise."""
        ttl = lease.ttl if ttl is None else ttl
        with _translated("extend", lease.session_id):
            reply = await self._extend_one(lease, ttl, self._keeping)
        kept = _kept(lease, reply, ttl)
        if isinstance(kept, LeaseLost):
            raise kept
        return kept

    async def extend_many(
        self, leases: Sequence[Lease], *, ttl: timedelta
    ) -> list[Lease | LeaseLost]:
        """``extend`` of each lease in one round trip (a pipeline): each lease extended,
        or the ``LeaseLost`` saying why not. Redis failing fails them all."""
        if not leases:
            return []
        with _translated("extend", leases[0].session_id if len(leases) == 1 else "*"):
            async with self._keeping.pipeline(transaction=False) as pipe:
                for lease in leases:
                    await self._extend_one(lease, ttl, pipe)
                replies = await pipe.execute()
        return [_kept(lease, reply, ttl) for lease, reply in zip(leases, replies, strict=True)]

    async def _extend_one(self, lease: Lease, ttl: timedelta, client: Any) -> Any:
        """The extend script for ``lease`` on ``client`` (the keeping client, or a
        pipeline of it: then only queued)."""
        return await self._extend(
            keys=[self.lease_key(lease.session_id), self.watch_key],
            args=[_value(lease), _millis(ttl), lease.session_id],
            client=client,
        )

    async def release(self, lease: Lease) -> bool:
        """Delete the lease if Redis still holds exactly this holder and fence; False if it
        had lapsed or another holder (or a newer fence) has it."""
        with _translated("release", lease.session_id):
            deleted = await self._release(
                keys=[self.lease_key(lease.session_id), self.watch_key],
                args=[_value(lease), lease.session_id],
            )
        return bool(deleted)

    async def lapsed(self, *, limit: int = 100) -> list[str]:
        """Sessions whose lease lapsed without being released (the holder died or froze),
        up to ``limit``; each is reported once, to whichever caller asks first."""
        with _translated("watch", "*"):
            found = await self._lapsed(
                keys=[self.watch_key], args=[f"{self._prefix}:lease:", limit]
            )
        return sorted(text for item in found if (text := _text(item)) is not None)

    async def holder(self, session_id: str) -> str | None:
        """Who holds ``session_id`` now, or None."""
        with _translated("read", session_id):
            current = await self._client.get(self.lease_key(session_id))
        text = _text(current)
        return None if text is None else _split(text)[0]


def _check_names(session_id: str, holder: str) -> None:
    if not session_id:
        raise InvalidInput("a lease needs a non-empty session id")
    if not holder:
        raise InvalidInput(
            f"a lease on session {session_id} needs a non-empty holder name",
            session_id=session_id,
        )


def _millis(ttl: timedelta) -> int:
    millis = int(ttl / timedelta(milliseconds=1))
    if millis < 1:
        raise InvalidInput(f"lease ttl must be at least 1 ms, got {ttl}", ttl=str(ttl))
    return millis


def _value(lease: Lease) -> str:
    return f"{lease.holder}|{lease.fence}"


def _split(value: str) -> tuple[str, int]:
    # The fence is digits only, so the last "|" separates it even if the holder has one.
    holder, _, fence = value.rpartition("|")
    return holder, int(fence)


def _text(reply: object) -> str | None:
    if reply is None:
        return None
    if isinstance(reply, bytes):
        return reply.decode()
    return str(reply)


def _kept(lease: Lease, reply: object, ttl: timedelta) -> Lease | LeaseLost:
    """What the extend script's ``reply`` (the lease's value now) says of ``lease``."""
    current = _text(reply)
    if current != _value(lease):
        return _lost(lease, current)
    return lease if ttl == lease.ttl else lease.model_copy(update={"ttl": ttl})


def _lost(lease: Lease, current: str | None) -> LeaseLost:
    where = f"lease on session {lease.session_id} for {lease.holder} at fence {lease.fence}"
    if current is None:
        return LeaseLost(
            f"{where} has lapsed; acquire it again",
            session_id=lease.session_id,
            holder=lease.holder,
            fence=lease.fence,
        )
    holder, fence = _split(current)
    return LeaseLost(
        f"{where} was taken by {holder} with fence {fence}",
        session_id=lease.session_id,
        holder=lease.holder,
        fence=lease.fence,
        current_holder=holder,
        current_fence=fence,
    )


@contextmanager
def _translated(action: str, session_id: str) -> Iterator[None]:
    try:
        yield
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(
            f"Redis failed to {action} the lease of session {session_id}: "
            f"{type(exc).__name__}: {exc}",
            session_id=session_id,
            action=action,
        ) from exc
