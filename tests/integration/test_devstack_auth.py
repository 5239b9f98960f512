"""`bh dev up` never leaves the buses open: Redis and NATS servers that an earlier version
of `bh dev up` started without authentication (CI machines and developers' checkouts
have them running) are replaced by ones that require the generated credentials.

Runs real redis-server and nats-server binaries in a dev home and on ports of its own.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import nats
import nats.errors
import pytest

from bh.devstack import binaries, probe
from bh.devstack.auth import OPERATOR, Secrets
from bh.devstack.errors import DevstackError
from bh.devstack.poll import poll_until
from bh.devstack.process import (
    PidRecord,
    is_running,
    read_pidfile,
    reload,
    spawn,
    write_pidfile,
)
from bh.devstack.state import StateDir
from runtime.credentials import write_secret
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


async def _updates_as(role: str, secrets: Secrets, port: int, stream: str) -> bool:
    """Whether ``role`` may update ``stream`` on the dev stack's nats-server."""
    client = await nats.connect(
        f"nats://127.0.0.1:{port}",
        user=role,
        password=secrets.password(role),
        allow_reconnect=False,
        error_cb=_quiet,
    )
    try:
        js = client.jetstream(timeout=2)
        config = (await js.stream_info(stream)).config
        try:
            await js.update_stream(replace(config, max_msgs=1000))
        except (TimeoutError, nats.errors.Error):
            return False
        return True
    finally:
        await client.close()


async def _quiet(error: Exception) -> None:
    """The refused update's permissions violation: the test asserts the refusal."""


async def test_up_reloads_a_running_nats_whose_permissions_are_an_older_versions(
    dev_env: dict[str, str],
) -> None:
    """Issue 31, finding 5: a nats-server started by an older ``bh dev up`` keeps the
    permissions it read at start (every role could update streams). ``bh dev up``
    rewrites ``nats.conf`` and reloads the running server (SIGHUP: no restart, the
    connections stay), so the roles lose the right at once."""
    up = ("up", "--without", "moto", "--without", "docker")
    assert bh_dev(*up, env=dev_env).returncode == 0
    state = StateDir(Path(dev_env["BH_DEV_HOME"]))
    secrets = Secrets(state.secrets)
    port = int(dev_env["BH_DEV_NATS_PORT"])
    record = read_pidfile(state.pidfile("nats"))
    assert record is not None
    older = secrets.nats_conf.read_text().replace('"$JS.API.STREAM.CREATE.*"', '"$JS.API.>"')
    write_secret(secrets.nats_conf, older)  # as the older version wrote it...
    assert reload(record)  # ...and the server read it
    operator = await nats.connect(
        f"nats://127.0.0.1:{port}", user=OPERATOR, password=secrets.password(OPERATOR)
    )
    try:
        await operator.jetstream().add_stream(name="RELOAD", subjects=["reload.>"])
        assert await _eventually_async(lambda: _updates_as("hands", secrets, port, "RELOAD"))

        again = bh_dev(*up, env=dev_env)

        assert "reloaded its users and permissions" in again.stdout, again.stdout
        assert not await _updates_as("hands", secrets, port, "RELOAD")
        assert read_pidfile(state.pidfile("nats")) == record  # the same server
        assert operator.is_connected  # a reload keeps the connections
    finally:
        await operator.close()


async def _eventually_async(condition: Callable[[], Awaitable[bool]]) -> bool:
    """The server applies a reload on its own time: poll with a deadline."""
    deadline = asyncio.get_running_loop().time() + 15
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True
