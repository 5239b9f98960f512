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

from runtime.build import build_id
from tests.support.http_server import free_port
from tests.support.processes import python_module
from tests.support.services import require
from tests.support.tcp_gate import TcpGate
from webapi.exposition import Scrape
from webapi.probes import Probes, serve

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
) -> dict[str, dict[str, Any]]:
    """Poll every /readyz until each answers ``wanted(name)``; their bodies."""
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
        if not pending:
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
