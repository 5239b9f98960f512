"""Readiness probes: does something speaking the right protocol answer at an address?

Plain sockets and ``http.client`` on purpose: no proxy settings from the environment, no
client library that retries, and each probe gives up within about a second.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TIMEOUT_S = 1.0


def tcp_open(host: str, port: int) -> bool:
    """True if anything accepts a TCP connection at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return True
    except OSError:
        return False


def redis_pong(host: str, port: int, *, password: str | None) -> bool:
    """True if a Redis server answers ``PING`` after ``AUTH password``: one that does not
    require that password (or any) does not count."""
    if password is None:
        return False
    auth = _resp("AUTH", password)
    expected = b"+OK\r\n+PONG"
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as conn:
            conn.sendall(auth + b"PING\r\n")
            return _read_until(conn, len(expected)).startswith(expected)
    except OSError:
        return False


def nats_login(host: str, port: int, *, user: str, password: str | None) -> bool:
    """True if a NATS server requires a login and accepts ``user``'s: one that lets anyone
    in does not count."""
    if password is None:
        return False
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as conn:
            info = _read_line(conn)
            if not info.startswith(b"INFO ") or not json.loads(info[5:]).get("auth_required"):
                return False
            login = {"user": user, "pass": password, "verbose": False, "pedantic": False}
            conn.sendall(b"CONNECT " + json.dumps(login).encode() + b"\r\nPING\r\n")
            return _read_line(conn).startswith(b"PONG")
    except (OSError, ValueError):
        return False


def _resp(*words: str) -> bytes:
    """A command in RESP, so a password is sent as data, whatever characters it holds."""
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        data = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _read_until(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
        if data.startswith(b"-"):
            break
    return data


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def http_status(host: str, port: int, path: str) -> int | None:
    """The status of ``GET path``, or None if nothing HTTP answers."""
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    return _status(conn, path)


def s3_status(host: str, port: int, *, access_key: str, secret_key: str) -> int | None:
    """The status of an S3 ``ListBuckets`` signed (SigV4) with these keys, or None: 200
    only from a server that knows the user."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="GET", url=f"http://{host}:{port}/")
    S3SigV4Auth(Credentials(access_key, secret_key), "s3", "us-east-1").add_auth(request)
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    return _status(conn, "/", headers=dict(request.headers.items()))


def unix_http_status(socket_path: Path, path: str) -> int | None:
    """The status of ``GET path`` over a Unix socket (the Docker API), or None."""
    return _status(_UnixHTTPConnection(socket_path), path)


def unix_http_json(socket_path: Path, path: str) -> Any:
    """The JSON body of ``GET path`` over a Unix socket, or None on any failure."""
    conn = _UnixHTTPConnection(socket_path)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return json.loads(response.read()) if response.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def _status(
    conn: http.client.HTTPConnection, path: str, *, headers: Mapping[str, str] | None = None
) -> int | None:
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: Path) -> None:
        super().__init__("localhost", timeout=TIMEOUT_S)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT_S)
        try:
            sock.connect(str(self._socket_path))
        except OSError:
            sock.close()
            raise
        self.sock = sock
