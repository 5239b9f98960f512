"""The allowlist egress proxy the Hands runs for sandboxed tools.

An HTTP forward proxy: absolute-URI requests for ``http://`` are forwarded (one request
per connection, bodies streamed), ``CONNECT host:port`` opens a tunnel (for https).
Every request must carry proxy credentials naming its operation (``route.proxy_token``);
the proxy asks ``policy(operation_id)`` for the destinations that operation's tool may
reach and refuses anything not exactly on that list, and any destination that resolves
to link-local addresses (169.254.0.0/16: cloud metadata) whatever the list says.

Credentials for a destination (``credentials``) are added to plain-http requests here,
so no secret ever enters a container. Secrets and tokens are never logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Self
from urllib.parse import urlsplit

from pydantic import SecretStr

from hands.egress.route import EgressRoute, proxy_token
from runtime.cancellation import cancel_and_wait

log = logging.getLogger(__name__)

#: The destinations (``host:port``) an operation may reach now: asked on every request, so
#: a grant the operator changes applies to a running operation's next request
#: (``hands.egress.policy.GrantPolicy`` reads it from the store, at most seconds old).
PolicyResolver = Callable[[str], Awaitable[Collection[str]]]
#: Per destination, headers the proxy adds to plain-http requests.
Credentials = Mapping[str, Mapping[str, SecretStr]]

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
_MAX_HEADERS = 100
_CHUNK = 64 * 1024
_LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 5.6.2)
_HOST = re.compile(r"[a-z0-9._-]{1,253}|\[[0-9a-f:.]{2,45}\]")  # never logged unchecked


@dataclass(frozen=True, kw_only=True, slots=True)
class ProxyLimits:
    """Bounds on what one client can make the proxy hold."""

    max_connections: int = 256
    max_header_bytes: int = 32 * 1024
    header_timeout: timedelta = timedelta(seconds=10)
    idle_timeout: timedelta = timedelta(seconds=60)
    connect_timeout: timedelta = timedelta(seconds=10)
    #: how long a policy that cannot be read (its store restarting) is asked again before
    #: the request is answered 503: unknown to the tool, never a refusal
    policy_timeout: timedelta = timedelta(seconds=15)


class _Refusal(Exception):
    """An HTTP error answer to the client."""

    def __init__(self, status: int, reason: str, detail: str = "") -> None:
        super().__init__(f"{status} {reason}: {detail}")
        self.status = status
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class _Head:
    """A parsed request or status line plus headers."""

    start: list[str]
    headers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        lowered = name.lower()
        return next((value for key, value in self.headers if key.lower() == lowered), None)

    def without(self, names: Collection[str]) -> list[tuple[str, str]]:
        listed = {token.strip().lower() for token in (self.get("connection") or "").split(",")}
        dropped = _HOP_BY_HOP | listed | {name.lower() for name in names}
        return [(key, value) for key, value in self.headers if key.lower() not in dropped]


@dataclass(slots=True)
class _Activity:
    """When either direction of a tunnel last moved bytes."""

    at: float = field(default_factory=time.monotonic)


class EgressProxy:
    """``await proxy.start(host, port)`` … ``await proxy.close()`` (or ``async with``)."""

    def __init__(
        self,
        *,
        secret: SecretStr,
        policy: PolicyResolver,
        credentials: Credentials | None = None,
        limits: ProxyLimits | None = None,
    ) -> None:
        self._secret = secret
        self._policy = policy
        self._credentials = {
            destination.lower(): dict(headers)
            for destination, headers in (credentials or {}).items()
        }
        self._limits = limits or ProxyLimits()
        self._server: asyncio.Server | None = None
        self._active = 0
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int = 0) -> None:
        """Listen on ``host:port`` (0: a free port; see ``address``)."""
        try:
            self._server = await asyncio.start_server(
                self._accept, host, port, limit=self._limits.max_header_bytes
            )
        except OSError as error:
            raise OSError(
                error.errno,
                f"the egress proxy cannot listen on {host}:{port} ({error.strerror}); to "
                "serve a Docker network's gateway the Hands must run in the host's network "
                "namespace",
            ) from error

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the egress proxy is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    def route(self, network: str) -> EgressRoute:
        """How containers on ``network`` reach this proxy."""
        host, port = self.address
        return EgressRoute(network=network, host=host, port=port, secret=self._secret)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await cancel_and_wait(*self._handlers)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- one client connection -----------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._active += 1
        try:
            if self._active > self._limits.max_connections:
                raise _Refusal(503, "Service Unavailable", "too many connections")
            await self._serve(reader, writer)
        except _Refusal as refusal:
            await _answer(writer, refusal)
            await _linger(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # ``close``: the connection ends here, nobody awaits this task
        except Exception:
            log.exception("egress proxy: unexpected failure")
        finally:
            self._active -= 1
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await self._read_head(reader, request=True)
        method, target, _version = head.start
        operation_id = self._authenticate(head)
        host, port, path = _destination(method, target)
        destination = f"{host}:{port}"
        await self._authorize(operation_id, destination)
        upstream_reader, upstream_writer = await self._connect(operation_id, host, port)
        try:
            if method == "CONNECT":
                log.info("egress: operation=%s CONNECT %s", operation_id, destination)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await self._splice(reader, writer, upstream_reader, upstream_writer)
            else:
                status = await self._forward(
                    head, path, destination, reader, writer, upstream_reader, upstream_writer
                )
                log.info(
                    "egress: operation=%s %s %s -> %s", operation_id, method, destination, status
                )
        finally:
            upstream_writer.close()

    async def _read_head(self, reader: asyncio.StreamReader, *, request: bool) -> _Head:
        # A client must send its head promptly; a server may think for a while.
        timeout = self._limits.header_timeout if request else self._limits.idle_timeout
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout.total_seconds())
        except asyncio.LimitOverrunError as error:
            status = (431, "Request Header Fields Too Large") if request else (502, "Bad Gateway")
            raise _Refusal(*status, "headers too large") from error
        malformed = (400, "Bad Request") if request else (502, "Bad Gateway")
        lines = raw.decode("latin-1").split("\r\n")[:-2]
        start = lines[0].split(" ", 2)
        if len(start) < (3 if request else 2) or len(lines) > _MAX_HEADERS + 1:
            raise _Refusal(*malformed, "malformed head")
        head = _Head(start)
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not _TOKEN.fullmatch(name):
                raise _Refusal(*malformed, "malformed header")
            head.headers.append((name, value.strip()))
        return head

    def _authenticate(self, head: _Head) -> str:
        """The operation named by valid proxy credentials (407 otherwise)."""
        scheme, _, encoded = (head.get("proxy-authorization") or "").partition(" ")
        try:
            user_pass = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            user_pass = ""
        operation_id, _, token = user_pass.rpartition(":")
        expected = proxy_token(self._secret, operation_id).encode()
        if (
            scheme.lower() != "basic"
            or not operation_id
            or not hmac.compare_digest(expected, token.encode())
        ):
            raise _Refusal(407, "Proxy Authentication Required", "bad proxy credentials")
        return operation_id

    async def _authorize(self, operation_id: str, destination: str) -> None:
        if destination not in await self._allowed(operation_id):
            log.warning("egress refused: operation=%s destination=%s", operation_id, destination)
            raise _Refusal(403, "Forbidden", f"{destination} is not on the allowlist")

    async def _allowed(self, operation_id: str) -> set[str]:
        """The operation's destinations, asked again while the policy cannot be read: a
        failed lookup decides nothing, so it ends as 503 (the tool cannot tell whether
        its request would have been allowed), not as a 403 it would take as final."""
        deadline = time.monotonic() + self._limits.policy_timeout.total_seconds()
        pause = 0.05
        while True:
            try:
                return {entry.lower() for entry in await self._policy(operation_id)}
            except Exception as error:
                if time.monotonic() + pause > deadline:
                    log.warning("egress: policy of operation=%s failed: %r", operation_id, error)
                    raise _Refusal(
                        503, "Service Unavailable", "the egress policy cannot be read"
                    ) from error
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _connect(
        self, operation_id: str, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            raise _Refusal(502, "Bad Gateway", f"cannot resolve {host}") from error
        addresses = [info[4][0] for info in found if _permitted(str(info[4][0]))]
        if not addresses:
            log.warning("egress refused: operation=%s %s is link-local", operation_id, host)
            raise _Refusal(403, "Forbidden", f"{host} resolves to a forbidden address")
        timeout = self._limits.connect_timeout.total_seconds()
        for address in dict.fromkeys(addresses):
            with contextlib.suppress(OSError, TimeoutError):
                return await asyncio.wait_for(
                    asyncio.open_connection(
                        str(address), port, limit=self._limits.max_header_bytes
                    ),
                    timeout,
                )
        raise _Refusal(502, "Bad Gateway", f"cannot connect to {host}:{port}")

    # -- plain http ------------------------------------------------------------------------

    async def _forward(
        self,
        head: _Head,
        path: str,
        destination: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> str:
        """Forward one request and its response; the response's status."""
        injected = self._credentials.get(destination, {})
        # The request target names the server, never a client-chosen Host (RFC 9112 3.2.2).
        headers = head.without([*injected, "host"])
        host = destination.removesuffix(":80")
        headers.insert(0, ("Host", host))
        headers += [(name, secret.get_secret_value()) for name, secret in injected.items()]
        headers.append(("Connection", "close"))
        upstream_writer.write(_encode(f"{head.start[0]} {path} HTTP/1.1", headers))
        await self._relay_body(head, reader, upstream_writer)
        response = await self._read_head(upstream_reader, request=False)
        writer.write(
            _encode(" ".join(response.start), [*response.without(()), ("Connection", "close")])
        )
        length = response.get("content-length")
        remaining = int(length) if length and length.isdigit() else None
        await self._copy(upstream_reader, writer, _Activity(), remaining)
        return response.start[1]

    async def _relay_body(
        self, head: _Head, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter
    ) -> None:
        if "chunked" in (head.get("transfer-encoding") or "").lower():
            await self._relay_chunked(reader, upstream)
            return
        length = head.get("content-length") or "0"
        if not length.isdigit():
            raise _Refusal(400, "Bad Request", "bad Content-Length")
        await self._copy(reader, upstream, _Activity(), int(length))

    async def _relay_chunked(
        self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter
    ) -> None:
        idle = self._limits.idle_timeout.total_seconds()
        while True:
            line = await asyncio.wait_for(reader.readuntil(b"\r\n"), idle)
            upstream.write(line)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as error:
                raise _Refusal(400, "Bad Request", "bad chunk size") from error
            if size == 0:
                break
            await self._copy(reader, upstream, _Activity(), size + 2)
        while (trailer := await asyncio.wait_for(reader.readuntil(b"\r\n"), idle)) != b"\r\n":
            upstream.write(trailer)
        upstream.write(b"\r\n")
        await upstream.drain()

    # -- byte pumps -----------------------------------------------------------------------

    async def _copy(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        activity: _Activity,
        remaining: int | None = None,
    ) -> None:
        """Copy until EOF (or ``remaining`` bytes); idle means neither side moved."""
        idle = self._limits.idle_timeout.total_seconds()
        while remaining is None or remaining > 0:
            size = _CHUNK if remaining is None else min(_CHUNK, remaining)
            try:
                data = await asyncio.wait_for(source.read(size), idle)
            except TimeoutError:
                if time.monotonic() - activity.at < idle:
                    continue
                raise
            if not data:
                if remaining:
                    raise ConnectionError("peer closed mid-body")
                break
            activity.at = time.monotonic()
            if remaining is not None:
                remaining -= len(data)
            sink.write(data)
            await sink.drain()
        if remaining is None and sink.can_write_eof():
            sink.write_eof()

    async def _splice(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        activity = _Activity()
        pumps = [
            asyncio.create_task(self._copy(reader, upstream_writer, activity)),
            asyncio.create_task(self._copy(upstream_reader, writer, activity)),
        ]
        try:
            await asyncio.gather(*pumps)
        finally:
            await cancel_and_wait(*pumps)


def _destination(method: str, target: str) -> tuple[str, int, str]:
    """``(host, port, origin-form path)`` of a proxy request."""
    if method == "CONNECT":
        host, colon, port = target.rpartition(":")
        path = ""
    else:
        parts = urlsplit(target)
        if parts.scheme.lower() != "http" or not parts.hostname:
            raise _Refusal(400, "Bad Request", "only absolute http:// URIs and CONNECT")
        host, colon, port = parts.hostname, ":", str(parts.port or 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = host.lower()
    if not colon or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Refusal(400, "Bad Request", "bad destination")
    return host.strip("[]"), int(port), path


def _permitted(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (ip.is_link_local or ip.is_unspecified or ip in _LINK_LOCAL)


def _encode(start: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [start, *(f"{name}: {value}" for name, value in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def _answer(writer: asyncio.StreamWriter, refusal: _Refusal) -> None:
    body = f"{refusal.status} {refusal.reason}: {refusal.detail}\n".encode()
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
    if refusal.status == 407:
        headers.append(("Proxy-Authenticate", 'Basic realm="brainhands"'))
    headers.append(("Connection", "close"))
    with contextlib.suppress(ConnectionError, RuntimeError):
        writer.write(_encode(f"HTTP/1.1 {refusal.status} {refusal.reason}", headers) + body)
        await writer.drain()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read what the client still sends (briefly, boundedly) before closing: closing
    with unread input resets the connection, and the client would lose the answer."""
    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(1.0):
            for _ in range(16):
                if not await reader.read(_CHUNK):
                    break
