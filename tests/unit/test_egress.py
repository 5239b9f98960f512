"""The egress proxy in-process, on loopback: an operation gets through with valid
credentials to exactly its allowed destinations, the configured credentials are added
on the way, and everything else is refused with the right status."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from hands.egress import EgressProxy, EgressRoute, ProxyLimits, proxy_token

SECRET = SecretStr("hands-secret")
INJECTED = "Bearer sekrit-value"


@dataclass
class Upstream:
    """A tiny HTTP server that records what reached it."""

    port: int = 0
    requests: list[tuple[str, list[tuple[str, str]], bytes]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = [tuple(line.split(": ", 1)) for line in head[1:] if line]
        lowered = {name.lower(): value for name, value in headers}
        body = b""
        if "content-length" in lowered:
            body = await reader.readexactly(int(lowered["content-length"]))
        elif lowered.get("transfer-encoding") == "chunked":
            while (size := int((await reader.readuntil(b"\r\n")).strip(), 16)) > 0:
                body += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")
        self.requests.append((head[0], headers, body))  # type: ignore[arg-type]
        reply = b"hello from upstream"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nKeep-Alive: 5\r\n\r\n" % len(reply))
        writer.write(reply)
        await writer.drain()
        writer.close()

    def header(self, index: int, name: str) -> list[str]:
        return [value for key, value in self.requests[index][1] if key.lower() == name.lower()]


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    recorder = Upstream()
    server = await asyncio.start_server(recorder.handle, "127.0.0.1", 0)
    recorder.port = server.sockets[0].getsockname()[1]
    async with server:
        yield recorder


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@dataclass
class Allowlist:
    by_operation: dict[str, list[str]] = field(default_factory=dict)

    async def __call__(self, operation_id: str) -> list[str]:
        return self.by_operation.get(operation_id, [])


@contextlib.asynccontextmanager
async def running(
    allow: Allowlist, credentials: dict[str, dict[str, SecretStr]] | None = None, **limits: float
) -> AsyncIterator[EgressProxy]:
    settings: dict[str, Any] = {
        key: timedelta(seconds=value) if "timeout" in key else int(value)
        for key, value in limits.items()
    }
    proxy = EgressProxy(
        secret=SECRET, policy=allow, credentials=credentials, limits=ProxyLimits(**settings)
    )
    await proxy.start("127.0.0.1")
    try:
        yield proxy
    finally:
        await proxy.close()


def credentials_of(operation_id: str, token: str | None = None) -> str:
    pair = f"{operation_id}:{token or proxy_token(SECRET, operation_id)}".encode()
    return "Basic " + base64.b64encode(pair).decode()


async def exchange(proxy: EgressProxy, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*proxy.address)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def get(url: str, authorization: str) -> bytes:
    return f"GET {url} HTTP/1.1\r\nProxy-Authorization: {authorization}\r\n\r\n".encode()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


async def test_an_allowed_request_is_forwarded_with_the_destinations_credentials(
    upstream: Upstream,
) -> None:
    destination = f"127.0.0.1:{upstream.port}"
    allow = Allowlist({"op-1": [destination]})
    async with running(allow, {destination: {"Authorization": SecretStr(INJECTED)}}) as proxy:
        response = await exchange(
            proxy,
            (
                f"GET http://{destination}/mail?to=a HTTP/1.1\r\n"
                f"Host: elsewhere.example\r\nProxy-Authorization: {credentials_of('op-1')}\r\n"
                "Authorization: Bearer forged\r\nConnection: keep-alive, X-Hop\r\n"
                "X-Hop: 1\r\nX-Keep: 2\r\n\r\n"
            ).encode(),
        )

    assert status_of(response) == 200 and response.endswith(b"hello from upstream")
    assert b"keep-alive" not in response.lower() and b"connection: close" in response.lower()
    assert upstream.requests[0][0] == "GET /mail?to=a HTTP/1.1"
    assert upstream.header(0, "Host") == [destination]
    assert upstream.header(0, "Authorization") == [INJECTED]
    assert upstream.header(0, "X-Keep") == ["2"]
    assert upstream.header(0, "X-Hop") == upstream.header(0, "Proxy-Authorization") == []


async def test_request_bodies_stream_through(upstream: Upstream) -> None:
    destination = f"127.0.0.1:{upstream.port}"
    auth = credentials_of("op-1")
    async with running(Allowlist({"op-1": [destination]})) as proxy:
        sized = await exchange(
            proxy,
            f"POST http://{destination}/a HTTP/1.1\r\nProxy-Authorization: {auth}\r\n"
            f"Content-Length: 5\r\n\r\nhello".encode(),
        )
        chunked = await exchange(
            proxy,
            f"POST http://{destination}/b HTTP/1.1\r\nProxy-Authorization: {auth}\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".encode(),
        )

    assert status_of(sized) == status_of(chunked) == 200
    assert [body for _, _, body in upstream.requests] == [b"hello", b"abcde"]


async def test_a_stdlib_client_gets_through_with_an_operation_id_needing_quotes(
    upstream: Upstream,
) -> None:
    operation_id = "op:7@session.1"
    destination = f"127.0.0.1:{upstream.port}"
    async with running(Allowlist({operation_id: [destination]})) as proxy:
        route = proxy.route("bh-egress")
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": route.proxy_url(operation_id)})
        )

        def fetch() -> bytes:
            with opener.open(f"http://{destination}/x", timeout=10) as response:
                return bytes(response.read())

        assert await asyncio.to_thread(fetch) == b"hello from upstream"


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        credentials_of("op-1", token="0" * 64),
        credentials_of("op-1", token=proxy_token(SECRET, "op-2")),
        "Basic !!!",
        "Bearer " + proxy_token(SECRET, "op-1"),
    ],
    ids=["missing", "wrong-token", "another-operations-token", "garbage", "not-basic"],
)
async def test_bad_credentials_are_refused(upstream: Upstream, authorization: str | None) -> None:
    destination = f"127.0.0.1:{upstream.port}"
    header = f"Proxy-Authorization: {authorization}\r\n" if authorization else ""
    async with running(Allowlist({"op-1": [destination], "op-2": [destination]})) as proxy:
        response = await exchange(
            proxy, f"GET http://{destination}/ HTTP/1.1\r\n{header}\r\n".encode()
        )

    assert status_of(response) == 407 and b"Proxy-Authenticate: Basic" in response
    assert upstream.requests == []


async def test_destinations_off_the_allowlist_are_refused_and_logged_without_the_token(
    upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    allow = Allowlist({"op-1": [f"127.0.0.1:{upstream.port}"]})
    auth = credentials_of("op-1")
    with caplog.at_level(logging.INFO, logger="hands.egress"):
        async with running(allow) as proxy:
            other_port = await exchange(proxy, get(f"http://127.0.0.1:{upstream.port + 1}/", auth))
            other_host = await exchange(proxy, get(f"http://localhost:{upstream.port}/", auth))
            tunnel = await exchange(
                proxy,
                f"CONNECT 127.0.0.1:22 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n".encode(),
            )

    assert [status_of(r) for r in (other_port, other_host, tunnel)] == [403, 403, 403]
    assert upstream.requests == []
    assert "operation=op-1 destination=127.0.0.1:22" in caplog.text
    assert proxy_token(SECRET, "op-1") not in caplog.text


async def test_link_local_destinations_are_refused_even_when_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    allow = Allowlist({"op-1": ["169.254.169.254:80"]})
    async with running(allow) as proxy:
        metadata = "http://169.254.169.254/latest/meta-data/"
        response = await exchange(proxy, get(metadata, credentials_of("op-1")))

    assert status_of(response) == 403 and b"forbidden address" in response


async def test_a_policy_that_cannot_be_read_is_no_refusal_but_unavailable(
    upstream: Upstream,
) -> None:
    """The store behind the policy restarting is not a decision: a tool told 403 takes it
    as a definite refusal (the compose run's count tool failed its task that way), so the
    proxy keeps asking for ``policy_timeout`` and then answers 503 (unknown; nothing sent)."""
    calls = 0

    async def broken(operation_id: str) -> list[str]:
        nonlocal calls
        calls += 1
        raise RuntimeError("registry down")

    limits = ProxyLimits(policy_timeout=timedelta(seconds=0.3))
    proxy = EgressProxy(secret=SECRET, policy=broken, limits=limits)
    await proxy.start("127.0.0.1")
    try:
        url = f"http://127.0.0.1:{upstream.port}/"
        response = await exchange(proxy, get(url, credentials_of("op-1")))
    finally:
        await proxy.close()

    assert status_of(response) == 503 and b"policy" in response
    assert calls > 1 and upstream.requests == []


async def test_a_policy_back_within_the_wait_lets_the_request_through(upstream: Upstream) -> None:
    destination = f"127.0.0.1:{upstream.port}"
    calls = 0

    async def restarting(operation_id: str) -> list[str]:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise RuntimeError("store restarting")
        return [destination]

    proxy = EgressProxy(secret=SECRET, policy=restarting)
    await proxy.start("127.0.0.1")
    try:
        response = await exchange(proxy, get(f"http://{destination}/", credentials_of("op-1")))
    finally:
        await proxy.close()

    assert status_of(response) == 200 and len(upstream.requests) == 1


async def test_connect_tunnels_to_an_allowed_destination(echo_port: int) -> None:
    async with running(Allowlist({"op-1": [f"127.0.0.1:{echo_port}"]})) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        writer.write(
            f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n"
            f"Proxy-Authorization: {credentials_of('op-1')}\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        writer.write(b"ping over the tunnel")
        echoed = await asyncio.wait_for(reader.readexactly(20), 10)
        writer.close()

    assert status_of(head) == 200 and echoed == b"ping over the tunnel"


async def test_an_oversized_head_is_refused() -> None:
    async with running(Allowlist(), max_header_bytes=1024) as proxy:
        response = await exchange(
            proxy, b"GET http://a:80/ HTTP/1.1\r\nX-Big: " + b"y" * 4096 + b"\r\n\r\n"
        )

    assert status_of(response) == 431


async def test_connections_beyond_the_limit_are_refused(echo_port: int) -> None:
    async with running(Allowlist({"op-1": [f"127.0.0.1:{echo_port}"]}), max_connections=1) as proxy:
        reader, holder = await asyncio.open_connection(*proxy.address)
        holder.write(
            f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n"
            f"Proxy-Authorization: {credentials_of('op-1')}\r\n\r\n".encode()
        )
        opened = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # it holds one
        try:
            response = await exchange(proxy, b"GET http://a:80/ HTTP/1.1\r\n\r\n")
        finally:
            holder.close()

    assert status_of(opened) == 200 and status_of(response) == 503


async def test_a_silent_client_is_dropped() -> None:
    async with running(Allowlist(), header_timeout=0.2) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        closed = await asyncio.wait_for(reader.read(), 10)
        writer.close()

    assert closed == b""


def test_the_proxy_url_is_deterministic_and_names_the_operation() -> None:
    route = EgressRoute(network="bh-egress", host="172.30.0.1", port=3128, secret=SECRET)
    again = EgressRoute(
        network="bh-egress", host="172.30.0.1", port=3128, secret=SecretStr("hands-secret")
    )

    url = route.proxy_url("op:1")

    assert url == again.proxy_url("op:1")
    assert url.startswith("http://op%3A1:") and url.endswith("@172.30.0.1:3128")
    assert route.proxy_url("op:2") != url
    environment = route.environment("op:1")
    assert environment["HTTP_PROXY"] == environment["https_proxy"] == url
    assert environment["NO_PROXY"] == ""


@pytest.mark.parametrize(
    "request_line",
    ["CONNECT evil\nhost:80 HTTP/1.1", "GET https://a:443/ HTTP/1.1", "GET /relative HTTP/1.1"],
    ids=["bad-host", "not-http", "not-absolute"],
)
async def test_malformed_targets_are_refused(request_line: str) -> None:
    async with running(Allowlist({"op-1": ["a:80"]})) as proxy:
        response = await exchange(
            proxy,
            f"{request_line}\r\nProxy-Authorization: {credentials_of('op-1')}\r\n\r\n".encode(),
        )

    assert status_of(response) == 400
