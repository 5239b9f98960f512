"""Request-body limits of both HTTP APIs over real HTTP (issue 13, defect 12).

Every route that takes a body, of the Session API and of the Hands API, refuses a body
above the API's limit with 413 before keeping it: with a ``Content-Length`` above the
limit nothing of the body is kept; a chunked body (no length) is counted as it streams
and keeping stops at the limit (the rest is discarded, so the client sees the 413).
The server runs in this process: ``tracemalloc``'s peak while a request is served is
what its body grew the server's memory by.
"""

from __future__ import annotations

import re
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from contracts import InvalidInput
from hands.api.app import create_app as hands_app
from hands.api_server import ApiSettings
from hands.executor import Executor
from hands.sandbox.process import ProcessSandbox
from session_api.app import create_app as session_app
from session_api.server import SessionApiSettings
from session_store import open_store
from tests.support.http_server import serve

pytestmark = pytest.mark.sqlite

TOKEN = "limits-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024
#: the documented default of both APIs (docs/session-api.md, docs/hands-api.md)
DEFAULT_MAX_BODY_BYTES = MIB
#: what serving a refused 8 MiB request may allocate at its peak (the limit, a chunk,
#: the client's and the server's buffers); unchecked, the body itself is held (8 MiB+)
PEAK = 3 * MIB
BIG = 8 * MIB


async def peak_while(request: Awaitable[httpx.Response]) -> tuple[httpx.Response, int]:
    """The response, and the peak of memory allocated (above the start) while serving it."""
    start, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    response = await request
    _, peak = tracemalloc.get_traced_memory()
    return response, peak - start


@asynccontextmanager
async def session_api(tmp_path: Path) -> AsyncIterator[FastAPI]:
    store = await open_store(f"sqlite:///{tmp_path / 'session.db'}")
    try:
        yield session_app(store=store, wakes=None, token=SecretStr(TOKEN))
    finally:
        await store.close()


@asynccontextmanager
async def hands_api(tmp_path: Path) -> AsyncIterator[FastAPI]:
    store = await open_store(f"sqlite:///{tmp_path / 'hands.db'}")

    async def publish(event: Any) -> None:
        pass

    sandbox = ProcessSandbox(tmp_path / "runs")
    executor = Executor(store=store, sandbox=sandbox, publish=publish, executor_id="limits")
    try:
        yield hands_app(
            store=store, executor=executor, sandbox=sandbox, bus=None, token=SecretStr(TOKEN)
        )
    finally:
        await store.close()


APIS: dict[str, Callable[[Path], Any]] = {"session": session_api, "hands": hands_api}


def body_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route that may take a body (from the app's OpenAPI
    document, which lists every route), path parameters filled in."""
    found = []
    for path, operations in app.openapi()["paths"].items():
        for method in sorted(set(operations) & {"post", "put", "patch", "delete"}):
            found.append((method.upper(), re.sub(r"\{(\w+)\}", r"x-\1", path)))
    return found


async def chunks(total: int, sent: list[int], size: int = 64 * 1024) -> AsyncIterator[bytes]:
    """A streamed body of ``total`` bytes; ``sent`` counts what the client produced."""
    piece = b"x" * size
    while sent[0] < total:
        sent[0] += len(piece)
        yield piece


def refused(response: httpx.Response, limit: int) -> None:
    assert response.status_code == 413, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert f"{limit:,}" in error["message"], error["message"]
    assert error["details"]["limit"] == limit


@pytest.mark.parametrize("which", sorted(APIS))
async def test_a_body_over_the_limit_is_refused_unread_on_every_route(
    tmp_path: Path, which: str
) -> None:
    async with APIS[which](tmp_path) as app:
        routes = body_routes(app)
        assert len(routes) >= (2 if which == "session" else 3), routes
        tracemalloc.start()
        try:
            async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as http:
                for method, path in routes:
                    started = time.monotonic()
                    # With a Content-Length above the limit (streamed by the client too,
                    # whose own copy of a bytes body would count in the peak).
                    length = {**JSON, "Content-Length": str(BIG)}
                    response, peak = await peak_while(
                        http.request(method, path, content=chunks(BIG, [0]), headers=length)
                    )
                    refused(response, DEFAULT_MAX_BODY_BYTES)
                    assert peak < PEAK, (method, path, peak)
                    # Chunked, without a length.
                    sent = [0]
                    response, peak = await peak_while(
                        http.request(method, path, content=chunks(BIG, sent), headers=JSON)
                    )
                    refused(response, DEFAULT_MAX_BODY_BYTES)
                    assert peak < PEAK, (method, path, peak)
                    assert time.monotonic() - started < 5, (method, path)
        finally:
            tracemalloc.stop()


async def test_a_body_under_the_limit_still_works(tmp_path: Path) -> None:
    async with (
        session_api(tmp_path) as app,
        serve(app) as url,
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        # Just under the limit, chunked: read whole and handed to the route.
        sent = [0]
        body = {"request_id": "r1", "input": "hello"}
        response = await http.post("/v1/sessions/s1/submissions", json=body)
        assert response.status_code == 201, response.text
        response = await http.post(
            "/v1/sessions/s1/submissions",
            content=chunks(DEFAULT_MAX_BODY_BYTES - 64 * 1024, sent),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text  # read whole: not JSON


async def test_the_limit_is_configurable(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'session.db'}")
    try:
        app = session_app(store=store, wakes=None, token=SecretStr(TOKEN), max_body_bytes=2000)
        async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            body = {"request_id": "r1", "input": "y" * 4000}
            refused(await http.post("/v1/sessions/s1/submissions", json=body), 2000)
            ok = await http.post(
                "/v1/sessions/s1/submissions", json={"request_id": "r1", "input": "y"}
            )
            assert ok.status_code == 201
    finally:
        await store.close()


def test_the_servers_read_their_limits_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BH_SESSION_API_TOKEN", TOKEN)
    monkeypatch.setenv("BH_HANDS_API_TOKEN", TOKEN)
    monkeypatch.setenv("BH_STORE_URL", f"sqlite:///{tmp_path / 'store.db'}")
    assert SessionApiSettings.from_env().max_body_bytes == DEFAULT_MAX_BODY_BYTES
    assert ApiSettings.from_env().max_body_bytes == DEFAULT_MAX_BODY_BYTES
    monkeypatch.setenv("BH_SESSION_API_MAX_BODY_BYTES", "5000")
    monkeypatch.setenv("BH_HANDS_API_MAX_BODY_BYTES", "6000")
    assert SessionApiSettings.from_env().max_body_bytes == 5000
    assert ApiSettings.from_env().max_body_bytes == 6000
    monkeypatch.setenv("BH_HANDS_API_MAX_BODY_BYTES", "10")
    with pytest.raises(InvalidInput, match="max_body_bytes"):
        ApiSettings.from_env()
