"""Faults the chaos harness injects into the infrastructure under the system: the store
(its write lock held), Redis (clients paused), NATS (streams purged, or the server
restarted without its data) and the Docker engine (restarted with containers running).

Each returns what it did, for the schedule. The dev stack's servers are touched only
when ``bh dev`` started them for the URLs the run uses; otherwise a fault says so and
does the nearest thing it can through the servers' own APIs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import docker  # type: ignore[import-untyped]
import nats
import nats.errors
import nats.js.errors

from bh.chaos_clients import nats_client, redis_client
from bh.devstack.config import DevConfig
from bh.devstack.process import is_running, read_pidfile
from bh.devstack.state import StateDir
from bus import DISPATCH_STREAM, RESULTS_STREAM, Bus, BusSettings
from hands.sandbox import LABEL_OWNER

#: the store outage's length, seconds
OUTAGE = (15.0, 30.0)
#: how long the engine restart waits for one of the run's containers to be running
IN_RUN_WITHIN = 15.0
#: how long Redis's clients are paused, seconds (past the Brains' 2 s lease)
REDIS_PAUSE = (3.0, 6.0)


@dataclass(frozen=True)
class Infra:
    """What the infrastructure faults need to know of the run."""

    env: dict[str, str]
    namespace: str
    store_path: Path


async def store_outage(infra: Infra, rng: random.Random, stop: threading.Event) -> str:
    """Hold the SQLite store's write lock (``BEGIN IMMEDIATE`` from another connection)
    for 15 to 30 s: every commit, claim and result write waits, then fails, meanwhile."""
    seconds = rng.uniform(*OUTAGE)
    held = await asyncio.to_thread(_hold_write_lock, infra.store_path, seconds, stop)
    return f"write lock held {held:.1f} s"


def _hold_write_lock(path: Path, seconds: float, stop: threading.Event) -> float:
    connection = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        stop.wait(seconds)  # set when the run ends early: never outlive it
        connection.execute("ROLLBACK")
        return time.monotonic() - started
    finally:
        connection.close()


async def pause_redis(infra: Infra, rng: random.Random) -> str:
    """``CLIENT PAUSE <ms> ALL``: every Redis command waits 3 to 6 s, longer than a lease,
    so lease extensions fail or come too late."""
    seconds = rng.uniform(*REDIS_PAUSE)
    client = redis_client(infra.env["BH_REDIS_URL"])
    try:
        await client.client_pause(int(seconds * 1000), all=True)
    finally:
        await client.aclose()
    await asyncio.sleep(seconds)
    return f"clients paused {seconds:.1f} s"


async def purge_streams(infra: Infra) -> str:
    """Purge the run's dispatch and results streams: every message not yet consumed (and
    every result event kept) is gone; only the store's intents remain."""
    nc = await nats_client(infra.env["BH_NATS_URL"])
    try:
        bus = Bus(nc, BusSettings(url=infra.env["BH_NATS_URL"], namespace=infra.namespace))
        purged = []
        for name in (DISPATCH_STREAM, RESULTS_STREAM):
            stream = bus.stream(name)
            try:
                info = await bus.js.stream_info(stream)
                await bus.js.purge_stream(stream)
                purged.append(f"{stream} ({info.state.messages})")
            except nats.js.errors.NotFoundError:
                purged.append(f"{stream} (absent)")
        return "purged " + ", ".join(purged)
    finally:
        await nc.close()


async def wipe_nats(infra: Infra) -> str:
    """SIGKILL nats-server, delete its JetStream store and start it again: every stream,
    consumer and message is gone. When ``bh dev`` did not start the run's server, delete
    the run's two streams instead (the same loss for this run), and say so."""
    data = await asyncio.to_thread(_kill_dev_nats, infra.env["BH_NATS_URL"])
    if data is None:
        return "not ours: " + await _delete_streams(infra)
    await asyncio.to_thread(shutil.rmtree, data, True)
    done = await asyncio.to_thread(_dev, "restart", "nats")
    return "restarted without its data" if done else "restart failed"


def _kill_dev_nats(url: str) -> Path | None:
    """The store dir of the dev stack's nats-server serving ``url``, once it is killed;
    None when ``bh dev`` did not start that server."""
    config = DevConfig.from_env(os.environ)
    if urlsplit(url).port != config.ports.nats:
        return None
    state = StateDir(config.home)
    record = read_pidfile(state.pidfile("nats"))
    if record is None or not record.started_by_us or not is_running(record):
        return None
    os.kill(record.pid, signal.SIGKILL)
    for _ in range(100):
        if not is_running(record):
            break
        threading.Event().wait(0.05)
    return state.root / "data" / "nats"


async def _delete_streams(infra: Infra) -> str:
    nc = await nats_client(infra.env["BH_NATS_URL"])
    try:
        bus = Bus(nc, BusSettings(url=infra.env["BH_NATS_URL"], namespace=infra.namespace))
        for name in (DISPATCH_STREAM, RESULTS_STREAM):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await bus.js.delete_stream(bus.stream(name))
        return "the run's streams deleted"
    finally:
        await nc.close()


async def restart_nats() -> str:
    done = await asyncio.to_thread(_dev, "restart", "nats")
    return "ok" if done else "not ours: skipped"


async def restart_docker(infra: Infra) -> str:
    """``bh dev restart docker`` while the run's tool containers are running (the first
    moment one is, within ``IN_RUN_WITHIN`` s; said so when none was): the engine goes
    down under them (Docker sandbox only)."""
    running = await asyncio.to_thread(_running_containers, infra)
    done = await asyncio.to_thread(_dev, "restart", "docker")
    return f"{'ok' if done else 'not ours: skipped'} ({running})"


def _running_containers(infra: Infra) -> str:
    url = infra.env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    owned = {"label": f"{LABEL_OWNER}={infra.namespace}", "status": "running"}
    deadline = time.monotonic() + IN_RUN_WITHIN
    with contextlib.closing(docker.DockerClient(base_url=url)) as engine:
        while time.monotonic() < deadline:
            names = [container.name for container in engine.containers.list(filters=owned)]
            if names:
                return f"{len(names)} running: {', '.join(sorted(names))}"
            time.sleep(0.1)
    return f"none running in {IN_RUN_WITHIN:.0f} s"


def _dev(*args: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", *args],
        capture_output=True,
        check=False,
        timeout=180,
    )
    return done.returncode == 0
