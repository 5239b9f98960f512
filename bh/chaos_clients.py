"""The harness's own NATS and Redis clients: as an insider (the credentials the run's
URLs name, the password read from the ``passfile`` a URL names) or anonymous (the same
server, no credential at all) — the client forged messages come from first.

A URL names a user and the file holding its password, never the password
(``nats://brain@host:4222?passfile=/secrets/nats-brain.pass``); a dev stack's
``nats-<role>.pass`` files sit side by side, so ``as_role`` gives another role's URL.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio
from nats.aio.client import Client

from runtime.credentials import PASSFILE, endpoint


def as_role(url: str, role: str) -> str:
    """The URL of the same server as another NATS role of a dev stack
    (``nats-<role>.pass`` beside the URL's password file); ``url`` when there is none."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    passfiles = [Path(value) for name, value in query if name == PASSFILE]
    if not passfiles or not parts.username:
        return url
    other = passfiles[-1].with_name(f"nats-{role}.pass")
    if not other.exists():
        return url
    rest = [(n, v) for n, v in query if n != PASSFILE] + [(PASSFILE, str(other))]
    netloc = f"{role}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(rest), parts.fragment))


async def nats_client(url: str, *, anonymous: bool = False) -> Client:
    """A NATS connection that gives up quickly (the harness's, not a service's); one the
    server refused is closed, so no socket is left behind."""
    found = endpoint(url)
    nc = Client()
    try:
        await nc.connect(
            found.url,
            error_cb=_quiet,  # a refused connection is what a forgery expects: no traceback
            connect_timeout=5,
            max_reconnect_attempts=0,
            allow_reconnect=False,
            user=None if anonymous else found.username,
            password=None if anonymous else found.password,
        )
    except BaseException:
        with contextlib.suppress(Exception):
            await nc.close()
        transport: Any = nc._transport
        if transport is not None:  # a refused CONNECT leaves its socket open
            transport.close()
        raise
    return nc


async def _quiet(error: Exception) -> None:
    return None


def redis_client(url: str, *, anonymous: bool = False) -> redis.asyncio.Redis:
    found = endpoint(url)
    if anonymous:
        return redis.asyncio.Redis.from_url(found.url)
    return redis.asyncio.Redis.from_url(found.url, username=found.username, password=found.password)


def redis_sync_url(url: str) -> tuple[str, dict[str, str]]:
    """A blocking client's URL and credential keywords (RQ wants a blocking client)."""
    found = endpoint(url)
    credentials = {"username": found.username, "password": found.password}
    return found.url, {name: value for name, value in credentials.items() if value is not None}
