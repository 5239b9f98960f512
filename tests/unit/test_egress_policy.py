"""The egress proxy's policy (``hands.egress.policy.GrantPolicy``) follows the operator's
grant changes (issue 31): a revoked grant stops new proxied requests once the grant it
read is ``fresh_for`` old, and a tool making many requests still costs the store one
read per tool version per ``fresh_for``, not one per request.

Time is this process's monotonic clock, stood in for by a clock the test moves; the
store is the embedded SQLite one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import Operation, StoreUnavailable
from contracts.tool import NetworkPolicy, ToolDefinition
from hands.egress import EgressProxy
from hands.egress.policy import GrantPolicy
from session_store import SessionStore, open_store
from tests.unit.test_egress import SECRET, credentials_of, exchange, get, status_of

MAIL = "mail.internal:8025"
FRESH = timedelta(seconds=5)


class Clock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by.total_seconds()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    await opened.tools.register(mailer(MAIL))
    try:
        yield opened
    finally:
        await opened.close()


def mailer(*allow: str) -> ToolDefinition:
    return ToolDefinition(
        name="mailer",
        version=1,
        network=NetworkPolicy(allow=allow),
        image="test/mailer",
        image_id="sha256:" + "7" * 64,
    )


async def operation(store: SessionStore, operation_id: str) -> None:
    await store.create_operation(
        Operation(operation_id=operation_id, session_id="s1", tool="mailer", tool_version=1)
    )


async def revoke(store: SessionStore) -> None:
    await store.tools.grant("mailer", 1, NetworkPolicy(), by="ada", reason="switched off")


def counted(
    calls: list[str], name: str, read: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def counting(*args: Any) -> Any:
        calls.append(name)
        return await read(*args)

    return counting


async def test_a_revoked_grant_is_no_longer_given_once_the_read_is_stale(
    store: SessionStore,
) -> None:
    clock = Clock()
    policy = GrantPolicy(store, fresh_for=FRESH, clock=clock)
    await operation(store, "op-1")
    assert await policy("op-1") == (MAIL,)
    await revoke(store)
    clock.advance(FRESH * 0.9)
    assert await policy("op-1") == (MAIL,)  # the bounded staleness: read less than 5 s ago
    clock.advance(FRESH * 0.2)
    assert await policy("op-1") == ()
    await store.tools.grant("mailer", 1, NetworkPolicy(allow=(MAIL,)), by="ada", reason="back")
    clock.advance(FRESH)
    assert await policy("op-1") == (MAIL,)


async def test_a_running_operations_proxied_requests_follow_the_revocation(
    store: SessionStore,
) -> None:
    """Through the real proxy: allowed, revoked by the operator, then refused (403)."""
    clock = Clock()
    reached: list[bytes] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    destination = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    await store.tools.grant(
        "mailer", 1, NetworkPolicy(allow=(destination,)), by="ada", reason="the test's host"
    )
    await operation(store, "op-1")
    proxy = EgressProxy(secret=SECRET, policy=GrantPolicy(store, fresh_for=FRESH, clock=clock))
    await proxy.start("127.0.0.1")
    request = get(f"http://{destination}/", credentials_of("op-1"))
    try:
        async with server:
            allowed = await exchange(proxy, request)
            await revoke(store)
            clock.advance(FRESH)
            refused = await exchange(proxy, request)
    finally:
        await proxy.close()

    assert (status_of(allowed), status_of(refused)) == (200, 403)
    assert len(reached) == 1


async def test_many_requests_read_the_store_once_per_tool_version_per_fresh_for(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    calls: list[str] = []
    monkeypatch.setattr(store, "get_operation", counted(calls, "op", store.get_operation))
    monkeypatch.setattr(store.tools, "get", counted(calls, "tool", store.tools.get))
    policy = GrantPolicy(store, fresh_for=FRESH, clock=clock)
    for operation_id in ("op-1", "op-2"):
        await operation(store, operation_id)
    for _ in range(50):
        assert await policy("op-1") == (MAIL,)
        assert await policy("op-2") == (MAIL,)
    assert calls == ["op", "tool", "op"]  # each operation's tool once; its grant once
    clock.advance(FRESH)
    assert await policy("op-2") == (MAIL,) and await policy("op-1") == (MAIL,)
    assert calls == ["op", "tool", "op", "tool"]  # the grant again; the tool is kept


async def test_a_grant_that_cannot_be_read_again_is_not_given_stale(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that cannot answer decides nothing: the proxy asks again and ends in 503,
    never on a grant the operator may have revoked meanwhile."""
    clock = Clock()
    policy = GrantPolicy(store, fresh_for=FRESH, clock=clock)
    await operation(store, "op-1")
    assert await policy("op-1") == (MAIL,)

    async def down(*_: object) -> None:
        raise StoreUnavailable("the store is restarting")

    monkeypatch.setattr(store.tools, "get", down)
    clock.advance(FRESH)
    with pytest.raises(StoreUnavailable):
        await policy("op-1")


async def test_an_unknown_operation_or_tool_reaches_nothing_and_is_not_remembered(
    store: SessionStore,
) -> None:
    clock = Clock()
    policy = GrantPolicy(store, fresh_for=FRESH, clock=clock)
    assert await policy("op-later") == ()  # asked before its record exists
    await operation(store, "op-later")
    assert await policy("op-later") == (MAIL,)
    await store.create_operation(
        Operation(operation_id="op-x", session_id="s1", tool="absent", tool_version=1)
    )
    assert await policy("op-x") == ()


async def test_what_is_kept_is_bounded(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(store, "get_operation", counted(calls, "op", store.get_operation))
    policy = GrantPolicy(store, fresh_for=FRESH, clock=Clock(), remembered=2)
    for operation_id in ("op-1", "op-2", "op-3"):
        await operation(store, operation_id)
        await policy(operation_id)
    assert calls == ["op"] * 3
    await policy("op-3")
    await policy("op-1")  # the oldest was forgotten: read again
    assert calls == ["op"] * 4


def test_fresh_for_is_not_negative() -> None:
    with pytest.raises(ValueError, match="fresh_for"):
        GrantPolicy(None, fresh_for=timedelta(seconds=-1))  # type: ignore[arg-type]
