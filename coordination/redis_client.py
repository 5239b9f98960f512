"""The one way a Redis client is made: from a URL whose password lives in a file.

Every service, the CLI and the tests build their clients here, so a Redis that requires a
password (the dev stack's does, as production's must) is met the same way everywhere:
``redis://[user@]host:port/db?passfile=/path/to/0600-file`` (see ``runtime.credentials``).
redis-py itself would take ``passfile`` for an unknown connection option and fail.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from runtime.credentials import endpoint


def connect(url: str, **options: Any) -> redis.asyncio.Redis:
    """An asyncio client for ``url``; ``options`` go to ``redis.asyncio.Redis``."""
    bare, credentials = _split(url)
    return redis.asyncio.Redis.from_url(bare, **credentials, **options)


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
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        bare, max_connections=connections, timeout=wait, **credentials, **named
    )
    return redis.asyncio.Redis.from_pool(pool)  # its aclose() closes the pool too


def connect_sync(url: str, **options: Any) -> redis.Redis:
    """A blocking client for ``url`` (RQ's queues and workers want one)."""
    bare, credentials = _split(url)
    return redis.Redis.from_url(bare, **credentials, **options)


def _split(url: str) -> tuple[str, dict[str, Any]]:
    found = endpoint(url)
    credentials = {"username": found.username, "password": found.password}
    return found.url, {name: value for name, value in credentials.items() if value is not None}
