"""`bh dev up` never leaves the buses open: Redis and NATS servers that an earlier version
of `bh dev up` started without authentication (CI machines and developers' checkouts
have them running) are replaced by ones that require the generated credentials.

Runs real redis-server and nats-server binaries in a dev home and on ports of its own.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bh.devstack import binaries, probe
from bh.devstack.errors import DevstackError
from bh.devstack.poll import poll_until
from bh.devstack.process import PidRecord, is_running, spawn, write_pidfile
from bh.devstack.state import StateDir
from tests.support.services import bh_dev, free_ports

pytestmark = [pytest.mark.redis, pytest.mark.nats]


@pytest.fixture
def dev_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    try:
        binaries.redis_server(), binaries.nats_server()
    except DevstackError as error:
        pytest.skip(str(error))
    redis_port, nats_port, http_port, moto_port = free_ports(4)
    env = {
        **os.environ,
        "BH_DEV_HOME": str(tmp_path / "dev"),
        "BH_DEV_REDIS_PORT": str(redis_port),
        "BH_DEV_NATS_PORT": str(nats_port),
        "BH_DEV_NATS_HTTP_PORT": str(http_port),
        "BH_DEV_MOTO_PORT": str(moto_port),
        "COLUMNS": "200",
    }
    yield env
    bh_dev("down", env=env)


def _start_unauthenticated(env: dict[str, str]) -> tuple[PidRecord, PidRecord]:
    """What the previous `bh dev up` ran: no password, no users; pidfiles as it wrote them."""
    state = StateDir(Path(env["BH_DEV_HOME"]))
    state.create()
    redis_argv = (
        str(binaries.redis_server()),
        *("--bind", "127.0.0.1", "--port", env["BH_DEV_REDIS_PORT"]),
        *("--save", "", "--appendonly", "no", "--dir", str(state.data("redis"))),
        *("--daemonize", "no"),
    )
    nats_argv = (
        str(binaries.nats_server()),
        *("-a", "127.0.0.1", "-p", env["BH_DEV_NATS_PORT"], "-m", env["BH_DEV_NATS_HTTP_PORT"]),
        *("-js", "--store_dir", str(state.data("nats"))),
    )
    records = []
    for name, argv in (("redis", redis_argv), ("nats", nats_argv)):
        record = spawn(argv, log_path=state.log(name), env=env)
        write_pidfile(state.pidfile(name), record)
        records.append(record)
    assert _eventually(lambda: probe.tcp_open("127.0.0.1", int(env["BH_DEV_REDIS_PORT"])))
    assert _eventually(lambda: probe.tcp_open("127.0.0.1", int(env["BH_DEV_NATS_PORT"])))
    return records[0], records[1]


def _eventually(condition: Callable[[], bool]) -> bool:
    return poll_until(condition, timeout=timedelta(seconds=15))


def _anonymous_redis_ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(128)


def _nats_info(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        return conn.recv(4096)


def test_servers_running_without_authentication_are_replaced(dev_env: dict[str, str]) -> None:
    old_redis, old_nats = _start_unauthenticated(dev_env)
    redis_port, nats_port = int(dev_env["BH_DEV_REDIS_PORT"]), int(dev_env["BH_DEV_NATS_PORT"])
    assert _anonymous_redis_ping(redis_port).startswith(b"+PONG")  # open, as before

    started = bh_dev("up", "--without", "moto", "--without", "docker", env=dev_env)

    assert started.returncode == 0, started.stdout + started.stderr
    assert not is_running(old_redis) and not is_running(old_nats)
    assert _anonymous_redis_ping(redis_port).startswith(b"-NOAUTH")
    assert b'"auth_required":true' in _nats_info(nats_port)
    again = bh_dev("up", "--without", "moto", "--without", "docker", env=dev_env)
    assert again.stdout.count("already running") == 2, again.stdout  # and kept after that
