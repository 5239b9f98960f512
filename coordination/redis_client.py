"""The one way a Redis client is made: from a URL whose password lives in a file.

Every service, the CLI and the tests build their clients here, so a Redis that requires a
password (the dev stack's does, as production's must) is met the same way everywhere:
``redis://[user@]host:port/db?passfile=/path/to/0600-file`` (see ``runtime.credentials``).
redis-py itself would take ``passfile`` for an unknown connection option and fail.

Every client also gets explicit health settings (``options`` override them), so a
connection whose peer died silently — a partition: no reset, no FIN — is noticed within
a bound and replaced, never left in the pool (issue 31, finding 15):

- ``socket_timeout`` 5 s: a reply that does not come ends the command (a timeout) and
  the connection; blocking commands wait less (``coordination.timer``, the wake
  consumer's 1 s ``BLPOP``);
- ``socket_connect_timeout`` 5 s, and TCP keepalive on;
- ``health_check_interval`` 10 s: a connection idle that long is PINGed before use;
- a retry, twice, 50 ms to 0.5 s apart, on a connection error or a timeout: the command
  goes again on a fresh connection. The project's scripts are written to be repeated
  (a lease's acquire by the same holder returns its fence).
"""

from __future__ import annotations

from typing import Any, Final

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from runtime.credentials import endpoint

#: seconds (see the module docstring)
SOCKET_TIMEOUT_S: Final = 5.0
CONNECT_TIMEOUT_S: Final = 5.0
HEALTH_CHECK_S: Final = 10
_RETRIES: Final = 2
_RETRY_ON: Final = [redis.ConnectionError, redis.TimeoutError]


def connect(url: str, **options: Any) -> redis.asyncio.Redis:
    """An asyncio client for ``url``; ``options`` go to ``redis.asyncio.Redis``."""
    bare, credentials = _split(url)
    retry = AsyncRetry(ExponentialBackoff(cap=0.5, base=0.05), _RETRIES)
    return redis.asyncio.Redis.from_url(bare, **credentials, **_healthy(options, retry))


def connect_bounded(
    url: str, *, connections: int, wait: float = 10.0, name: str | None = None
) -> redis.asyncio.Redis:
    """An asyncio client for ``url`` over at most ``connections`` connections: a caller
    finding them all busy waits (up to ``wait`` seconds) for one to come back, instead
    of opening another. Many concurrent short commands share a few connections, so a
    process's connections to Redis do not grow with its concurrency. ``name``: each
    connection's client name (``CLIENT LIST`` shows whose it is)."""
    bare, credentials = _split(url)
    named = {"client_name": name} if name else {}
    retry = AsyncRetry(ExponentialBackoff(cap=0.5, base=0.05), _RETRIES)
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        bare,
        max_connections=connections,
        timeout=wait,
        **credentials,
        **_healthy(named, retry),
    )
    return redis.asyncio.Redis.from_pool(pool)  # its aclose() closes the pool too


def connect_sync(url: str, **options: Any) -> redis.Redis:
    """A blocking client for ``url`` (RQ's queues and workers want one)."""
    bare, credentials = _split(url)
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), _RETRIES)
    return redis.Redis.from_url(bare, **credentials, **_healthy(options, retry))


def _healthy(options: dict[str, Any], retry: Retry | AsyncRetry) -> dict[str, Any]:
    """``options`` over the health settings of the module docstring."""
    return {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_S,
        "retry": retry,
        "retry_on_error": list(_RETRY_ON),
        **options,
    }


def _split(url: str) -> tuple[str, dict[str, Any]]:
    found = endpoint(url)
    credentials = {"username": found.username, "password": found.password}
    return found.url, {name: value for name, value in credentials.items() if value is not None}
