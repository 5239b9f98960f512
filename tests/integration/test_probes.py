"""``/livez`` and ``/readyz`` of every service, as real processes on the dev stack: all
ready with their dependencies up; with Redis cut off (a TCP gate between the services
and the real server), the ones that need it say so by name and stay live; ready again
when it is back."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette

from contracts import InvalidInput
from runtime.build import build_id
from tests.support.eventually import assert_eventually
from tests.support.http_server import free_port
from tests.support.processes import python_module
from tests.support.services import require
from tests.support.tcp_gate import TcpGate
from webapi.exposition import Scrape
from webapi.probes import EXIT_UNREADY, Probes, serve, unready_limit

pytestmark = [pytest.mark.redis, pytest.mark.nats]

#: service → its command, and the checks its readiness names
SERVICES = {
    "brain": (("brain", "worker"), {"store", "redis", "nats", "wake_route"}),
    "hands": (("hands", "--sandbox", "process"), {"store", "nats", "consumer", "engine"}),
    "scheduler": (("scheduler",), {"store", "redis", "nats"}),
    "session-api": (("session_api",), {"store", "redis"}),
    "hands-api": (("hands.api_server",), {"store", "nats", "engine"}),
}
NEEDS_REDIS = {"brain", "scheduler", "session-api"}


async def _probe(app: Starlette, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
        return await client.get(path)


async def test_readiness_names_the_failing_checks_and_keeps_them_for_a_moment() -> None:
    calls: list[str] = []

    async def fine() -> None:
        calls.append("fine")

    async def broken() -> None:
        raise ConnectionRefusedError("10.0.0.1:6379 refused")

    async def slow() -> None:
        await asyncio.sleep(5)

    probes = Probes("x", {"fine": fine, "broken": broken, "slow": slow}, timeout=0.2)
    answer = await _probe(probes.app(), "/readyz")
    assert answer.status_code == 503
    assert answer.json() == {
        "service": "x",
        "build": build_id(),
        "status": "not_ready",
        "checks": {"fine": "ok", "broken": "ConnectionRefusedError", "slow": "timeout"},
    }
    assert "10.0.0.1" not in answer.text  # open route: no addresses, no messages
    await _probe(probes.app(), "/readyz")
    assert calls == ["fine"]  # the second probe within a second reused the first's checks
    assert (await _probe(probes.app(), "/livez")).status_code == 200


async def test_a_process_whose_main_task_ended_is_not_live() -> None:
    probes = Probes("x", {}, alive=lambda: False)
    assert (await _probe(probes.app(), "/livez")).status_code == 503
    assert (await _probe(probes.app(), "/readyz")).json()["checks"] == {"process": "dead"}


async def test_readiness_failing_past_its_limit_makes_the_process_not_live() -> None:
    """A process that cannot get ready again is restarted (issue 31, finding 15: two
    schedulers answered ``/readyz`` 503 for over a minute while ``/livez`` stayed 200, so
    nothing restarted them): ``/livez`` is 200 until readiness has failed for
    ``unready_limit`` seconds, 503 after; the watch evaluates readiness with nobody
    probing, and says so (``expired``, the entry points then stop and exit)."""
    broken = True

    async def redis() -> None:
        if broken:
            raise ConnectionError("cut off")

    stopped: list[str] = []
    probes = Probes("x", {"redis": redis}, unready_limit=0.6, watch_every=0.1, exit_grace=None)
    assert (await _probe(probes.app(), "/readyz")).status_code == 503  # failing from now
    assert (await _probe(probes.app(), "/livez")).status_code == 200  # not for long yet
    async with probes.watching(lambda: stopped.append("stop")):  # nobody probes
        await assert_eventually(lambda: _set(probes.expired), within=10)
    live = await _probe(probes.app(), "/livez")
    assert (live.status_code, live.json()["status"]) == (503, "unready_too_long")
    assert stopped == ["stop"]
    with pytest.raises(SystemExit) as exited:
        probes.exit_if_expired()
    assert exited.value.code == EXIT_UNREADY


async def test_a_pass_in_between_starts_the_limit_over() -> None:
    outcomes = iter([False, False, True, False, False, False])

    async def flaky() -> None:
        if not next(outcomes):
            raise ConnectionError("cut off")

    probes = Probes("x", {"flaky": flaky}, unready_limit=0.3, cache=0, exit_grace=None)
    for _ in range(2):
        await probes.failing()
    await asyncio.sleep(0.3)  # past the limit, but the next round passes
    await probes.failing()
    await probes.failing()
    assert not probes.expired.is_set()


def test_the_unready_limit_is_read_from_the_environment() -> None:
    assert unready_limit({}) == 90.0
    assert unready_limit({"BH_UNREADY_LIMIT_S": "120"}) == 120.0
    assert unready_limit({"BH_UNREADY_LIMIT_S": "0"}) is None  # never
    with pytest.raises(InvalidInput, match="BH_UNREADY_LIMIT_S must be a number"):
        unready_limit({"BH_UNREADY_LIMIT_S": "90s"})


async def _set(event: asyncio.Event) -> bool:
    return event.is_set()


async def test_a_service_unready_past_its_limit_exits_for_its_supervisor_to_restart(
    tmp_path: Path,
) -> None:
    """A worker (the scheduler) and an API (the Session API) cut off from Redis for good:
    each exits with status 3 once readiness has failed ``BH_UNREADY_LIMIT_S`` (4 s) —
    and is live until then."""
    redis_url = require("BH_REDIS_URL", "Redis")
    redis = urlsplit(redis_url)
    async with TcpGate(redis.hostname or "127.0.0.1", redis.port or 6379) as gate:
        gated = redis_url.replace(redis.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        env = {
            "BH_STORE_URL": f"sqlite:///{tmp_path}/store.db",
            "BH_NAMESPACE": f"p{uuid.uuid4().hex[:8]}",
            "BH_REDIS_URL": gated,
            "BH_NATS_URL": require("BH_NATS_URL", "NATS JetStream"),
            "BH_SESSION_API_TOKEN": secrets.token_urlsafe(24),
            "BH_UNREADY_LIMIT_S": "4",
        }
        ports = {"scheduler": free_port(), "session-api": free_port()}
        processes = {
            "scheduler": python_module(
                "scheduler",
                stdout=subprocess.DEVNULL,
                env={**env, "BH_PROBE_PORT": str(ports["scheduler"])},
            ),
            "session-api": python_module(
                "session_api",
                "--port",
                str(ports["session-api"]),
                stdout=subprocess.DEVNULL,
                env=env,
            ),
        }
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                await _until(http, ports, processes, lambda name: 200)
                gate.shut()
                await _until(http, ports, processes, lambda name: 503)
                for name, port in ports.items():  # failing for about a second: still live
                    live = await http.get(f"http://127.0.0.1:{port}/livez")
                    assert live.status_code == 200, name
            for name, process in processes.items():
                code = await asyncio.wait_for(asyncio.to_thread(process.wait), 60)
                assert code == EXIT_UNREADY, (name, process.stderr.read()[-2000:])  # type: ignore[union-attr]
                assert "stopping, so that a fresh process takes over" in process.stderr.read()  # type: ignore[union-attr]
        finally:
            for process in processes.values():
                process.kill()
                process.communicate()


async def test_a_service_whose_connections_were_stranded_heals_without_a_restart(
    tmp_path: Path,
) -> None:
    """Issue 31, finding 15: after a partition, a scheduler's NATS connection was dead
    without its client knowing (``nats did not answer in 2.0 s`` for over a minute) until
    it was restarted. Its NATS and Redis connections stranded — never another byte,
    never closed (``TcpGate.strand``) — the scheduler notices, reconnects through new
    connections and is ready again, the same process all along."""
    redis_url = require("BH_REDIS_URL", "Redis")
    nats_url = require("BH_NATS_URL", "NATS JetStream")
    redis, nats = urlsplit(redis_url), urlsplit(nats_url)
    port = free_port()
    async with (
        TcpGate(redis.hostname or "127.0.0.1", redis.port or 6379) as redis_gate,
        TcpGate(nats.hostname or "127.0.0.1", nats.port or 4222) as nats_gate,
    ):
        env = {
            "BH_STORE_URL": f"sqlite:///{tmp_path}/store.db",
            "BH_NAMESPACE": f"p{uuid.uuid4().hex[:8]}",
            "BH_REDIS_URL": _through(redis_url, redis_gate),
            "BH_NATS_URL": _through(nats_url, nats_gate),
            "BH_PROBE_PORT": str(port),
        }
        scheduler = python_module("scheduler", stdout=subprocess.DEVNULL, env=env)
        ports, processes = {"scheduler": port}, {"scheduler": scheduler}
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                await _until(http, ports, processes, lambda name: 200)
                before = (redis_gate.forwarded, nats_gate.forwarded)
                redis_gate.strand()
                nats_gate.strand()
                stranded = time.monotonic()
                await _until(
                    http,
                    ports,
                    processes,
                    lambda name: 200,
                    after=_reconnected(redis_gate, nats_gate, before),
                )
                healed = time.monotonic() - stranded
            assert scheduler.poll() is None, "the scheduler was restarted, not healed"
            assert healed < 45, healed
        finally:
            scheduler.kill()
            scheduler.communicate()


def _through(url: str, gate: TcpGate) -> str:
    parts = urlsplit(url)
    return url.replace(parts.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")


def _reconnected(
    redis_gate: TcpGate, nats_gate: TcpGate, before: tuple[int, int]
) -> Callable[[], bool]:
    """Whether both clients opened new connections since ``before``."""
    return lambda: redis_gate.forwarded > before[0] and nats_gate.forwarded > before[1]


async def test_every_service_is_ready_then_not_without_redis_then_ready_again(
    tmp_path: Path,
) -> None:
    redis_url = require("BH_REDIS_URL", "Redis")
    nats_url = require("BH_NATS_URL", "NATS JetStream")
    redis = urlsplit(redis_url)
    token = secrets.token_urlsafe(24)
    async with TcpGate(redis.hostname or "127.0.0.1", redis.port or 6379) as gate:
        gated = redis_url.replace(redis.netloc.rpartition("@")[2], f"127.0.0.1:{gate.port}")
        env = {
            "BH_STORE_URL": f"sqlite:///{tmp_path}/store.db",
            "BH_NAMESPACE": f"p{uuid.uuid4().hex[:8]}",
            "BH_REDIS_URL": gated,
            "BH_NATS_URL": nats_url,
            "BH_HANDS_SANDBOX": "process",
            "BH_HANDS_PROCESS_ROOT": str(tmp_path / "runs"),
            "BH_HANDS_SECRET": secrets.token_hex(16),
            "BH_SESSION_API_TOKEN": token,
            "BH_HANDS_API_TOKEN": token,
        }
        ports = {name: free_port() for name in SERVICES}
        processes: dict[str, subprocess.Popen[str]] = {}
        try:
            for name, (command, _) in SERVICES.items():
                extra = ["--port", str(ports[name])] if name.endswith("-api") else []
                probe = {} if name.endswith("-api") else {"BH_PROBE_PORT": str(ports[name])}
                processes[name] = python_module(
                    *command, *extra, stdout=subprocess.DEVNULL, env={**env, **probe}
                )
            async with httpx.AsyncClient(timeout=5) as http:
                ready = await _until(http, ports, processes, lambda name: 200)
                for name, (_, checks) in SERVICES.items():
                    assert set(ready[name]["checks"]) == checks, name
                    assert set(ready[name]["checks"].values()) == {"ok"}, name

                gate.shut()
                cut = await _until(
                    http, ports, processes, lambda name: 503 if name in NEEDS_REDIS else 200
                )
                for name in NEEDS_REDIS:
                    failing = {c for c, why in cut[name]["checks"].items() if why != "ok"}
                    assert failing == {"redis"} or failing == {"redis", "wake_route"}, cut[name]
                for name in SERVICES:  # not ready is not dead: nothing restarts them
                    live = await http.get(f"http://127.0.0.1:{ports[name]}/livez")
                    assert live.status_code == 200, name

                gate.open()
                await _until(http, ports, processes, lambda name: 200)
        finally:
            for process in processes.values():
                process.kill()
                process.communicate()


async def _until(
    http: httpx.AsyncClient,
    ports: dict[str, int],
    processes: dict[str, subprocess.Popen[str]],
    wanted: Callable[[str], int],
    *,
    after: Callable[[], bool] = lambda: True,
) -> dict[str, dict[str, Any]]:
    """Poll every /readyz until each answers ``wanted(name)`` (and ``after()`` holds);
    their bodies."""
    deadline = time.monotonic() + 45
    bodies: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                errors = process.stderr.read() if process.stderr else ""
                raise AssertionError(f"{name} exited: {errors[-2000:]}")
        pending = []
        for name, port in ports.items():
            try:
                answer = await http.get(f"http://127.0.0.1:{port}/readyz")
            except httpx.HTTPError:
                pending.append(name)
                continue
            bodies[name] = answer.json()
            if answer.status_code != wanted(name):
                pending.append(name)
        if not pending and after():
            return bodies
        await asyncio.sleep(0.3)
    raise AssertionError(f"not as wanted in 45 s: {bodies}")


async def test_a_workers_metrics_need_the_scrape_token_and_are_absent_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = CollectorRegistry()
    Counter("brainhands_example", "an example", registry=registry).inc()
    probes = Probes("brain", {})
    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("BH_METRICS_TOKEN", token)
    served = serve(probes, host="127.0.0.1", port=free_port(), metrics=Scrape(registry))
    async with served as url, httpx.AsyncClient(base_url=str(url)) as http:
        assert (await http.get("/livez")).status_code == 200  # the probes stay open
        refused = await http.get("/metrics")
        assert refused.status_code == 401 and "example" not in refused.text
        wrong = await http.get("/metrics", headers={"Authorization": "Bearer " + "x" * 24})
        assert wrong.status_code == 401
        scraped = await http.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert scraped.status_code == 200
        assert "brainhands_example_total 1.0" in scraped.text
    monkeypatch.delenv("BH_METRICS_TOKEN")
    served = serve(probes, host="127.0.0.1", port=free_port(), metrics=Scrape(registry))
    async with served as url, httpx.AsyncClient(base_url=str(url)) as http:
        assert (await http.get("/metrics")).status_code == 404  # never open metrics
        assert (await http.get("/readyz")).status_code == 200
