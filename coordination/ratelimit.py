"""Request and token limits per model endpoint, shared by every Brain through Redis.

A fixed one-minute window per endpoint (``window_ms``: tests use a longer one), on
Redis's own clock (``TIME`` inside the script: the Brains' clocks are never compared).
**Reserve, then admit**: before a model call a Brain asks to be admitted with the
tokens the call may use (its estimate, ``brain.model.estimate``). One script checks the
window and, if it has room, counts the request and adds the estimate to the window's
tokens, so calls in flight count from the moment they are admitted. A window has room
while its requests are under the request limit and its tokens (settled calls at their
usage, calls in flight at their estimates) are under the token limit; otherwise the
answer is how long until the window ends. After the call the Brain settles the
reservation: the window that admitted the call is corrected by what the call used less
what was reserved (0 used: a call the server refused). A reservation never settled (the
Brain died, the call's outcome is unknown) stays charged at its estimate until its
window's keys expire, by Redis's own expiry.

Before, admission looked only at tokens already charged, and charges came after the
calls: 50 calls admitted together under a 1,000-token limit all went ahead. And a call
was charged to the window current when it finished, not the one that admitted it.

The Brain turns a wait into a durable sleep of the task (``brain.agent``): it holds no
session while the endpoint is busy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts import StoreUnavailable

WINDOW_MS: Final = 60_000

# KEYS: requests key, tokens key (each without its window). ARGV: requests per window
# (0: none), tokens per window (0: none), the window in ms, the tokens to reserve.
# Returns {ms to wait (0: admitted), the window, tokens reserved}.
_ADMIT = """
pcall(redis.replicate_commands)
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local size = tonumber(ARGV[3])
local window = math.floor(ms / size)
local left = (window + 1) * size - ms
local requests_key = KEYS[1] .. ':' .. window
local tokens_key = KEYS[2] .. ':' .. window
local rpm, tpm, estimate = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
if tpm > 0 and tonumber(redis.call('GET', tokens_key) or '0') >= tpm then
  return {left, window, 0}
end
if rpm > 0 and tonumber(redis.call('GET', requests_key) or '0') >= rpm then
  return {left, window, 0}
end
redis.call('INCR', requests_key)
redis.call('PEXPIRE', requests_key, 2 * size)
if tpm > 0 and estimate > 0 then
  redis.call('INCRBY', tokens_key, estimate)
  redis.call('PEXPIRE', tokens_key, 2 * size)
  return {0, window, estimate}
end
return {0, window, 0}
"""

# KEYS: the tokens key of the window that admitted the call. ARGV: tokens used less
# tokens reserved. A window whose keys expired is left alone (it is over: nothing
# counts against it any more); a window never goes below 0 (its keys were lost).
_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local left = redis.call('INCRBY', KEYS[1], tonumber(ARGV[1]))
if left < 0 then
  redis.call('INCRBY', KEYS[1], -left)
end
return left
"""


def endpoint_key(base_url: str, model: str) -> str:
    """The id of one model endpoint (the same server and model: the same limits)."""
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{model}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Admission:
    """A window's answer to a call: admitted (``wait`` 0), with the ``window`` that
    admitted it and the tokens ``reserved`` there; or the seconds to ``wait``."""

    wait: float
    window: int = 0
    reserved: int = 0

    @property
    def admitted(self) -> bool:
        return self.wait <= 0


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
        self._settle = client.register_script(_SETTLE)

    async def admit(self, tokens: int) -> Admission:
        """Admit a call that may use ``tokens`` (reserved in the window, which counts
        the request), or say how long to wait for the next window."""
        limits = (self.requests_per_minute or 0, self.tokens_per_minute or 0)
        args = (*limits, self.window_ms, max(0, tokens))
        wait, window, reserved = await self._call(self._admit, list(self._keys), args)
        return Admission(wait=int(wait) / 1000, window=int(window), reserved=int(reserved))

    async def settle(self, admission: Admission, tokens: int) -> None:
        """The admitted call used ``tokens``: correct its window by what it used less
        what was reserved for it (0: the call used nothing, say the server refused it)."""
        change = max(0, tokens) - admission.reserved
        if not admission.admitted or not self.tokens_per_minute or change == 0:
            return
        key = f"{self._keys[1]}:{admission.window}"
        await self._call(self._settle, [key], (change,))

    async def _call(self, script: Any, keys: list[str], args: tuple[int, ...]) -> Any:
        try:
            return await script(keys=keys, args=list(args))
        except (RedisError, OSError) as error:
            raise StoreUnavailable(f"model rate limits unavailable: {error}") from None
