"""The scheduler's timer: sleep until the next delayed wake or lease lapse is due, and
wake early when a Brain adds an earlier one.

Polling for due timers costs Redis commands every tick whether anything is due or not;
instead the scheduler asks once when the earliest delayed wake (``<prefix>:wake:due``)
and the earliest lease lapse (``<prefix>:leases:held``) are due, and waits on the timer
list ``<prefix>:wake:timer`` (``BLPOP``) until then, at most ``LONGEST_WAIT`` seconds.
What could come due sooner than that pushes to the list: a delayed wake
(``coordination.wakes``), and a new lease whose TTL is shorter than ``LONGEST_WAIT``
(``coordination.leases``); a longer lease lapses after the scheduler's next look anyway.
A lost signal (a scheduler restarting, several schedulers, one of them taking it) delays
a timer by at most ``LONGEST_WAIT``; the list holds one item, so signals cost no memory.

Both are due by Redis's clock (``TIME``; a delayed wake's due time is Redis's clock
plus the delay its asker gave), and the time left is reckoned against ``TIME`` inside
the same script: this host's clock plays no part (invariant 17).
"""

from __future__ import annotations

import math
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts.errors import StoreUnavailable

#: the longest the scheduler waits without looking: the bound on a lost signal's delay
LONGEST_WAIT: Final = 5.0
#: a blocking wait ends this long before the client's read timeout would
_READ_MARGIN: Final = 1.0

# KEYS: due (seconds), held (ms). Returns {ms until the earliest delayed wake or false,
# ms until the earliest lease lapse or false}, both by Redis's clock.
_NEXT = """
local wake = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local lease = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local due, left = false, false
if wake[2] then due = string.format('%.3f', tonumber(wake[2]) * 1000 - now) end
if lease[2] then left = string.format('%.3f', tonumber(lease[2]) - now) end
return {due, left}
"""


def timer_key(prefix: str) -> str:
    return f"{prefix}:wake:timer"


class Timer:
    def __init__(self, client: Redis, *, prefix: str, due_key: str, held_key: str) -> None:
        self._client = client
        self._prefix = prefix
        self._keys = [due_key, held_key]
        self._next = client.register_script(_NEXT)
        self._longest = _longest_block(client)

    async def next_in(self) -> float:
        """Seconds until the earliest delayed wake or lease lapse is due by Redis's
        clock (0: one is), at most ``LONGEST_WAIT``."""
        try:
            found = await self._next(keys=self._keys)
        except RedisError as error:
            raise StoreUnavailable(f"cannot read the timers: {error}") from None
        wait = LONGEST_WAIT
        for left in found:
            if left:
                wait = min(wait, float(left) / 1000)
        return max(0.0, wait)

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a signal; whether one came."""
        if seconds <= 0:
            return False
        try:
            # BLPOP's timeout is in seconds with a decimal; 0 would mean forever
            got = await self._client.blpop(
                [timer_key(self._prefix)], timeout=_at_least_1ms(min(seconds, self._longest))
            )
        except RedisError as error:
            raise StoreUnavailable(f"cannot wait for the timers: {error}") from None
        return got is not None


def _longest_block(client: Redis) -> float:
    """How long a blocking command may wait on ``client``: less than its read timeout
    (redis-py's default is 5 s, as long as ``LONGEST_WAIT``), or a wait that ends empty
    is a timeout error, a dropped connection and a new one."""
    pool = client.connection_pool
    read = pool.connection_class(**pool.connection_kwargs).socket_timeout  # not connected
    return math.inf if read is None else max(read - _READ_MARGIN, read / 2)


def _at_least_1ms(seconds: float) -> float:
    return max(math.ceil(seconds * 1000) / 1000, 0.001)
