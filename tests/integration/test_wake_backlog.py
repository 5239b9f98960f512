"""The Brains' scaling signal: the wake backlog per route, the age of its oldest wake, and
whether any Brain serves the route — read from Redis with no Brain running (scale from
zero) and served on the Session API's ``/metrics`` to a read token of the deployment."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from coordination import redis_client
from coordination.routes import Routes, route_of
from coordination.wakes import RQWakes
from session_api.app import create_app
from session_store import open_store
from tests.support.services import require
from webapi.auth import Access, Grant

pytestmark = pytest.mark.redis

READER = "reader-token-0123456789abcdef"
TENANT = "tenant-token-0123456789abcdef"


@pytest.fixture
async def wakes() -> AsyncIterator[RQWakes]:
    queue = RQWakes(
        require("BH_REDIS_URL", "Redis"), prefix=f"t{uuid.uuid4().hex[:8]}", route="rq1"
    )
    yield queue
    queue.close()


async def test_waiting_wakes_their_age_and_unserved_routes_are_reported(
    wakes: RQWakes,
) -> None:
    assert await wakes.backlog() == []
    await wakes.wake("s1", reason="test")
    await wakes.wake("s2", reason="test")
    await wakes.wake("s1", reason="a repeat coalesces")
    await asyncio.sleep(1.2)
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    try:
        await Routes(client, prefix=wakes.prefix).advertise(["job@1"])
    finally:
        await client.aclose()
    by_route = {b.route: b for b in await wakes.backlog()}
    waiting = by_route["rq1"]
    assert (waiting.waiting, waiting.served) == (2, False)
    assert 1.0 <= waiting.oldest_age_s < 60
    served = by_route[route_of(["job@1"])]
    assert (served.waiting, served.oldest_age_s, served.served) == (0, 0.0, True)


async def test_the_session_api_serves_the_backlog_to_a_deployment_reader(
    tmp_path: Path, wakes: RQWakes
) -> None:
    await wakes.wake("s1", reason="test")
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    grants = [
        Grant(name="reader", token=SecretStr(READER), access=Access.READ),
        Grant(name="tenant", token=SecretStr(TENANT), access=Access.ADMIN, tenants=("acme",)),
    ]
    app = create_app(store=store, wakes=wakes, tokens=grants, backlog=wakes.backlog)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            assert (await http.get("/metrics")).status_code == 401
            scoped = await http.get("/metrics", headers={"Authorization": f"Bearer {TENANT}"})
            assert scoped.status_code == 403  # the deployment's, not some sessions'
            answer = await http.get("/metrics", headers={"Authorization": f"Bearer {READER}"})
            assert answer.status_code == 200, answer.text
            text = answer.text
            assert 'brainhands_wake_backlog{route="rq1"} 1.0' in text
            assert 'brainhands_wake_route_served{route="rq1"} 0.0' in text
            assert 'brainhands_wake_oldest_age_seconds{route="rq1"}' in text
    finally:
        await store.close()


async def test_without_redis_the_scrape_answers_and_counts_the_error(tmp_path: Path) -> None:
    async def unreachable() -> list[object]:
        raise ConnectionRefusedError("redis is down")

    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    app = create_app(store=store, wakes=None, token=SecretStr(READER), backlog=unreachable)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            answer = await http.get("/metrics", headers={"Authorization": f"Bearer {READER}"})
    finally:
        await store.close()
    assert answer.status_code == 200
    assert 'brainhands_session_api_scrape_errors_total{source="redis"} 1.0' in answer.text
    assert "brainhands_wake_backlog{" not in answer.text
