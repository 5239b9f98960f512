"""Readiness probes: does something speaking the right protocol answer at an address?

Plain sockets and ``http.client`` on purpose: no proxy settings from the environment, no
client library that retries, and each probe gives up within about a second.
"""

from __future__ import annotations

import http.client
import json
import socket
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


def redis_pong(host: str, port: int) -> bool:
    """True if a Redis server answers ``PING``."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def http_status(host: str, port: int, path: str) -> int | None:
    """The status of ``GET path``, or None if nothing HTTP answers."""
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    return _status(conn, path)


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


def _status(conn: http.client.HTTPConnection, path: str) -> int | None:
    try:
        conn.request("GET", path)
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
