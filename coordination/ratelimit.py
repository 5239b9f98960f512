"""Request and token limits per model endpoint, shared by every Brain through Redis.

A fixed one-minute window per endpoint (``window_ms``: tests use a longer one), on
Redis's own clock (``TIME`` inside the script: the Brains' clocks are never compared).
Before a model call a Brain asks to be admitted: the call counts against the window's
requests unless the window is full — by requests, or by the tokens that calls in it
already used — and then the answer is how long until the window ends. After the call the
Brain charges the tokens it used. Tokens are charged after the fact (a call's size is
known only then), so one window may end a single call past its token limit; the next
window starts from zero.

The Brain turns a wait into a durable sleep of the task (``brain.agent``): it holds no
session while the endpoint is busy.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts import StoreUnavailable

WINDOW_MS: Final = 60_000

# KEYS: requests key, tokens key. ARGV: requests per window (0: none), tokens per window
# (0: none), the window in ms. Returns 0 (admitted: one request counted) or the ms until
# the window ends.
_ADMIT = """
pcall(redis.replicate_commands)
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local size = tonumber(ARGV[3])
local window = math.floor(ms / size)
local left = (window + 1) * size - ms
local requests_key = KEYS[1] .. ':' .. window
local tokens_key = KEYS[2] .. ':' .. window
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 and tonumber(redis.call('GET', tokens_key) or '0') >= tpm then
  return left
end
if rpm > 0 and tonumber(redis.call('GET', requests_key) or '0') >= rpm then
  return left
end
redis.call('INCR', requests_key)
redis.call('PEXPIRE', requests_key, 2 * size)
return 0
"""

# KEYS: tokens key. ARGV: tokens used, the window in ms.
_CHARGE = """
pcall(redis.replicate_commands)
local now = redis.call('TIME')
local size = tonumber(ARGV[2])
local window = math.floor((tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)) / size)
local key = KEYS[1] .. ':' .. window
redis.call('INCRBY', key, tonumber(ARGV[1]))
redis.call('PEXPIRE', key, 2 * size)
return 0
"""


def endpoint_key(base_url: str, model: str) -> str:
    """The id of one model endpoint (the same server and model: the same limits)."""
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{model}".encode()).hexdigest()[:16]


class ModelLimits:
    """Admission to model calls of one endpoint, in Redis (``client`` is the caller's)."""

    def __init__(
        self,
        client: Redis,
        endpoint: str,
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        prefix: str = "bh",
        window_ms: int = WINDOW_MS,
    ) -> None:
        self.endpoint = endpoint
        self.window_ms = window_ms
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._keys = (f"{prefix}:rate:{endpoint}:requests", f"{prefix}:rate:{endpoint}:tokens")
        self._admit = client.register_script(_ADMIT)
        self._charge = client.register_script(_CHARGE)

    async def admit(self) -> float:
        """0 when a call may start now (it is counted); else seconds to wait."""
        args = (self.requests_per_minute or 0, self.tokens_per_minute or 0, self.window_ms)
        left = await self._call(self._admit, list(self._keys), args)
        return int(left) / 1000

    async def charge(self, tokens: int) -> None:
        """Count the tokens a call used against the current window."""
        if tokens > 0 and self.tokens_per_minute:
            await self._call(self._charge, [self._keys[1]], (tokens, self.window_ms))

    async def _call(self, script: Any, keys: list[str], args: tuple[int, ...]) -> Any:
        try:
            return await script(keys=keys, args=list(args))
        except (RedisError, OSError) as error:
            raise StoreUnavailable(f"model rate limits unavailable: {error}") from None
