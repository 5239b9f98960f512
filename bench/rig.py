"""The whole system as separate processes, for the distributed benchmarks.

A ``Rig`` is one run's system: an SQLite store in a temporary folder that every process
shares, its own bus namespace and Redis prefix on the benchmark's own Redis and NATS
(``infrastructure``; Docker is the dev stack's), and a ``bh.fleet.Fleet`` of the
processes the benchmark names — Brain workers, the scheduler, Hands (Docker sandbox)
and the scripted model server with its probe (``bench.model_probe``). The benchmark
process submits and wakes as the Session API does (a submission commit, then a wake
routed to a compatible Brain) and reads times from the store's commit records, which
every process stamps from the same clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio
from pydantic import JsonValue

from bh.deploy import service
from bh.devstack import binaries
from bh.fleet import Fleet
from contracts import CommitRecord
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.routes import Routes, SessionRouter
from coordination.wakes import RQWakes
from hands.images import tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from webapi.server import free_port

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MODEL_TOKEN = secrets.token_hex(12)
OWNER = "bench-distributed"


def brain_argv(
    *, lease_seconds: float = 10, concurrency: int = 8, sandboxed: Iterable[str] = ()
) -> list[str]:
    argv = [*_module("brain"), "--plugin", "bench.workload:plugin"]
    for tool in sandboxed:
        argv += ["--sandboxed", tool]
    return [*argv, "--lease-seconds", str(lease_seconds), "--concurrency", str(concurrency)]


def scheduler_argv(*, reconcile_seconds: float = 30) -> list[str]:
    return [*_module("scheduler"), "--reconcile-seconds", str(reconcile_seconds)]


def hands_argv(*, concurrency: int = 4) -> list[str]:
    return [*_module("hands"), "--sandbox", "docker", "--concurrency", str(concurrency)]


def _module(name: str) -> list[str]:
    """``python -m`` the service table's module of ``name`` (as ``bh.fleet.from_table``)."""
    return [PYTHON, "-m", *service(name).module]


@dataclass
class Rig:
    work: Path
    store: SessionStore
    fleet: Fleet
    wakes: RQWakes
    leases: RedisLeases
    redis: redis.asyncio.Redis
    redis_url: str
    model_url: str

    async def submit(
        self, session_id: str, input: JsonValue, request_id: str = "r1", *, wake: bool = True
    ) -> None:
        """What the Session API does: the submission commit, then a routed wake."""
        await SessionClient(self.store).submit(session_id, request_id, input)
        if wake:
            await self.wakes.wake(session_id, reason="submission")

    async def stop(self, *names: str) -> None:
        """SIGTERM (a Brain hands its leases back), then wait; SIGKILL after 30 s."""
        await asyncio.to_thread(self._stop, names)

    def _stop(self, names: Iterable[str]) -> None:
        running = [self.fleet.processes[n] for n in names if n in self.fleet.processes]
        for process in running:
            if process.poll() is None:
                process.terminate()
        for process in running:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    async def lease_left(self, session_id: str) -> float:
        """Seconds until the session's lease lapses (0 when nobody holds it)."""
        millis = await self.redis.pttl(self.leases.lease_key(session_id))
        return max(0, int(millis)) / 1000

    async def wake_all(self, sessions: Iterable[str], *, at_once: int = 16) -> None:
        """Wake many sessions at once, as many Session API requests would (bounded: the
        router's Redis client has a pool of 100 connections)."""
        gate = asyncio.Semaphore(at_once)

        async def wake(session_id: str) -> None:
            async with gate:
                await self.wakes.wake(session_id, reason="submission")

        await asyncio.gather(*(wake(session_id) for session_id in sessions))

    async def records(self, session_id: str) -> list[CommitRecord]:
        return [record async for record in self.store.history(session_id)]

    async def answered_at(self, session_id: str, request_id: str = "r1") -> float | None:
        """When the commit that settled the submission was made (epoch seconds)."""
        for record in await self.records(session_id):
            for submission in record.commit.submissions:
                if submission.request_id == request_id and submission.status.is_final:
                    return record.committed_at.timestamp()
        return None

    async def until_answered(
        self, sessions: Iterable[str], *, within: float = 120, every: float = 0.1
    ) -> dict[str, float]:
        """Each session's answer time; ``TimeoutError`` when one is not answered."""
        wanted = list(sessions)
        pending, answered = set(wanted), {}
        deadline = time.monotonic() + within
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"not answered within {within} s: {sorted(pending)[:5]}")
            for session_id in sorted(pending):
                handle = await self.store.session(session_id)
                submission = await handle.submission("r1")
                if submission is not None and submission.status.is_final:
                    assert submission.status.value == "answered", submission.error
                    pending.discard(session_id)
            if pending:
                await asyncio.sleep(every)
        for session_id in wanted:
            when = await self.answered_at(session_id)
            assert when is not None
            answered[session_id] = when
        return answered

    async def until_ready(self, name: str, *, within: float = 60) -> None:
        """Until the Brain ``name`` takes wakes: its consumer's connection (named
        ``<holder>.wakes``, the holder naming the pid) is blocked in a dequeue."""
        pid = self.fleet.processes[name].pid
        sync = redis_client.connect_sync(self.redis_url)
        deadline = time.monotonic() + within
        try:
            while time.monotonic() < deadline:
                clients = await asyncio.to_thread(sync.client_list, _type="normal")
                if any(_takes_wakes(client, pid) for client in clients):
                    return
                if self.fleet.processes[name].poll() is not None:
                    raise RuntimeError(f"{name} exited; see {self.work / name}.log")
                await asyncio.sleep(0.1)
        finally:
            sync.close()
        raise TimeoutError(f"{name} did not start taking wakes")

    def name_of(self, holder: str) -> str | None:
        """The fleet process whose pid is in a lease holder (``host:pid:incarnation``)."""
        parts = holder.split(":")
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1
        for name, process in self.fleet.processes.items():
            if process.pid == pid and process.poll() is None:
                return name
        return None

    async def probe(self, *, reset: bool = False) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10) as client:
            url = self.model_url.removesuffix("/v1") + "/probe"
            answer = await (client.post(url) if reset else client.get(url))
            report: dict[str, Any] = answer.json()
            return report


@dataclass(frozen=True)
class Infrastructure:
    redis_url: str
    nats_url: str


@asynccontextmanager
async def infrastructure() -> AsyncIterator[Infrastructure]:
    """A Redis and a NATS JetStream of the benchmark's own, on free loopback ports: the
    dev stack's are shared, and other work flushes and restarts them (``bh chaos``)."""
    work = Path(tempfile.mkdtemp(prefix="bench-infra-"))
    redis_port, nats_port, monitor = free_port(), free_port(), free_port()
    redis_server = [str(binaries.redis_server()), "--bind", "127.0.0.1", "--port"]
    redis_server += [str(redis_port), "--save", "", "--appendonly", "no", "--dir", str(work)]
    nats_server = [str(binaries.nats_server()), "-a", "127.0.0.1", "-p", str(nats_port)]
    nats_server += ["-m", str(monitor), "-js", "--store_dir", str(work / "nats")]
    fleet = Fleet(work, dict(os.environ), {"redis": redis_server, "nats": nats_server})
    fleet.start("redis")
    fleet.start("nats")
    services = Infrastructure(
        redis_url=f"redis://127.0.0.1:{redis_port}/0", nats_url=f"nats://127.0.0.1:{nats_port}"
    )
    try:
        await _until_up(services.redis_url, f"http://127.0.0.1:{monitor}/healthz")
        yield services
    finally:
        await asyncio.to_thread(fleet.stop_all)


async def _until_up(redis_url: str, nats_health: str) -> None:
    client = redis_client.connect(redis_url)
    deadline = time.monotonic() + 30
    try:
        async with httpx.AsyncClient(timeout=1) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(redis.RedisError, httpx.HTTPError):
                    if await client.ping() and (await http.get(nats_health)).status_code == 200:
                        return
                await asyncio.sleep(0.1)
    finally:
        await client.aclose()
    raise TimeoutError("the benchmark's Redis or NATS did not start")


@asynccontextmanager
async def rig(
    processes: dict[str, list[str]],
    *,
    infra: Infrastructure,
    start: Iterable[str] = (),
    tools: Iterable[str] = (),
    model: dict[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Rig]:
    """The system with ``processes`` (name → argv), ``start`` started now; the tool images
    ``tools`` registered first; ``model``, a scripted-model script, served as ``model``;
    ``env``: variables every process gets on top of the rig's."""
    work = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    prefix = f"bd{uuid.uuid4().hex[:8]}"
    env = {**_env(work, prefix, infra), **(env or {})}
    argv = dict(processes)
    if model is not None:
        script = work / "script.json"
        script.write_text(json.dumps(model))
        port = free_port()
        argv["model"] = [PYTHON, "-m", "bench.model_probe", "--script", str(script)]
        argv["model"] += ["--port", str(port)]
        env["BH_MODEL_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
    store = await open_store(env["BH_STORE_URL"])
    await _register(store, env["DOCKER_HOST"], tools)
    client = redis_client.connect(env["BH_REDIS_URL"])
    routes = Routes(client, prefix=prefix)
    wakes = RQWakes(env["BH_REDIS_URL"], prefix=prefix, router=SessionRouter(store, routes))
    fleet = Fleet(work, env, argv)
    running = Rig(
        work=work,
        store=store,
        fleet=fleet,
        wakes=wakes,
        leases=RedisLeases(client, prefix=prefix),
        redis=client,
        redis_url=env["BH_REDIS_URL"],
        model_url=env.get("BH_MODEL_BASE_URL", ""),
    )
    try:
        for name in ([] if model is None else ["model"]) + list(start):
            fleet.start(name)
        if model is not None:
            await _until_serving(running)
        yield running
    finally:
        await asyncio.to_thread(fleet.stop_all)
        wakes.close()
        await client.aclose()
        await store.close()


def _env(work: Path, prefix: str, infra: Infrastructure) -> dict[str, str]:
    env = {
        **os.environ,
        "BH_REDIS_URL": infra.redis_url,
        "BH_NATS_URL": infra.nats_url,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
        "BH_STORE_URL": f"sqlite:///{work / 'store.db'}",
        "BH_NAMESPACE": prefix,
        "BH_HANDS_OWNER": OWNER,
        "BH_HANDS_ACK_WAIT": "10",
        "BH_HANDS_SECRET": secrets.token_hex(16),
        "BH_SCRIPTED_MODEL_TOKEN": MODEL_TOKEN,
        "BH_MODEL_API_KEY": MODEL_TOKEN,
        "BH_MODEL_NAME": "scripted",
    }
    env.setdefault("DOCKER_HOST", "unix:///var/run/docker.sock")
    env.pop("BH_CRASH_AT", None)
    return env


async def _register(store: SessionStore, docker_url: str, tools: Iterable[str]) -> None:
    names = list(tools)
    if not names:
        return
    async with DockerSandbox(DockerSandboxConfig(owner=OWNER, docker_url=docker_url)) as docker:
        for name in names:
            await register_image(store, docker, tool_tag(name), registered_by="bench")


async def _until_serving(running: Rig) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            await running.probe()
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the model server did not start; see {running.work}/model.log")


def _takes_wakes(client: dict[str, str], pid: int | None) -> bool:
    name = client.get("name", "")
    return f":{pid}:" in name and name.endswith(".wakes") and "b" in client.get("flags", "")
