"""Scoped API tokens on both HTTP APIs, over real HTTP (issue 13, defect 19).

Two tenants' sessions (``acme:…`` and ``globex:…``) share one store. Each tenant has
tokens scoped to its sessions; a token is ``read``, ``operate`` or ``admin``. Every
route of both APIs is called with a token of the other tenant: lists leave the other
tenant's sessions and operations out, a session named in the path is 403, an
operation of another tenant is 404 (as if it did not exist), and nothing changes. A
read token cannot act. The single token of the existing configuration is unscoped.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import SecretStr

from contracts import InvalidInput, Operation, OperationStatus
from hands.api.app import create_app as hands_app
from hands.executor import Executor
from hands.sandbox.process import ProcessSandbox
from session_api.app import create_app as session_app
from session_api.console import console_router
from session_api.console.login import csrf_token
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve
from webapi.auth import Grant, grants_from_env

pytestmark = pytest.mark.sqlite

ADMIN = "admin-token-0123456789abcdef"
ACME_READ = "acme-read-0123456789abcdef"
ACME_OPS = "acme-ops-0123456789abcdef"
GLOBEX_READ = "globex-read-0123456789abcdef"
GLOBEX_OPS = "globex-ops-0123456789abcdef"

GRANTS = (
    Grant(name="acme-reader", token=SecretStr(ACME_READ), access="read", sessions=("acme:",)),
    Grant(name="acme-ops", token=SecretStr(ACME_OPS), access="operate", tenants=("acme",)),
    Grant(name="globex-reader", token=SecretStr(GLOBEX_READ), access="read", tenants=("globex",)),
    Grant(name="globex-ops", token=SecretStr(GLOBEX_OPS), access="operate", tenants=("globex",)),
)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Apis:
    store: SessionStore
    hands: str
    sessions: str
    hands_app: FastAPI
    sessions_app: FastAPI

    def client(self, which: str, token: str) -> httpx.AsyncClient:
        url = self.hands if which == "hands" else self.sessions
        return httpx.AsyncClient(base_url=url, headers=auth(token))


async def uncertain(store: SessionStore, operation_id: str, session_id: str) -> None:
    record = await store.create_operation(
        Operation(operation_id=operation_id, session_id=session_id, tool="act", args={})
    )
    record = await store.transition_operation(
        record, OperationStatus.RUNNING, executor="hands-dead", attempts=1
    )
    await store.transition_operation(record, OperationStatus.UNCERTAIN, reason="executor died")


@asynccontextmanager
async def open_apis(tmp_path: Path) -> AsyncIterator[Apis]:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    client = SessionClient(store)
    for session_id in ("acme:s1", "globex:s1"):
        await client.submit(session_id, "r1", "hello")
        await uncertain(store, f"op-{session_id.split(':')[0]}", session_id)

    async def publish(event: Any) -> None:
        pass

    sandbox = ProcessSandbox(tmp_path / "runs")
    executor = Executor(store=store, sandbox=sandbox, publish=publish, executor_id="scopes")
    hands = hands_app(
        store=store,
        executor=executor,
        sandbox=sandbox,
        bus=None,
        token=SecretStr(ADMIN),
        tokens=GRANTS,
    )
    sessions = session_app(store=store, wakes=None, token=SecretStr(ADMIN), tokens=GRANTS)
    try:
        async with serve(hands) as hands_url, serve(sessions) as sessions_url:
            yield Apis(store, hands_url, sessions_url, hands, sessions)
    finally:
        await store.close()


@pytest.fixture
async def apis(tmp_path: Path) -> AsyncIterator[Apis]:
    async with open_apis(tmp_path) as opened:
        yield opened


BODIES: dict[str, Any] = {
    "/v1/sessions/{session_id}/submissions": {"request_id": "r2", "input": "hi"},
    "/v1/sessions/{session_id}/cancel": {"request_id": "r1"},
    "/v1/sessions/{session_id}/inputs": {"request_id": "a1", "question_id": "q1", "value": "x"},
    "/v1/sessions/{session_id}/input-policy": {"policy": "reject"},
    "/v1/sessions/{session_id}/budget": {"budget": {"tokens": 10}},
    "/v1/sessions/{session_id}/retention": {"retention": {"keep_versions": 3}},
    "/v1/sessions/{session_id}/fork": {"at": 1, "into": "acme:fork"},
    "/v1/sessions/{session_id}/operations/{operation_id}/settle": {
        "outcome": "failed",
        "reason": "x",
    },
    "/v1/operations/{operation_id}/cancel": {"reason": "x"},
    "/v1/operations/{operation_id}/settle": {"outcome": "failed", "reason": "x"},
    "/v1/tools": {"image": "test/greet:1"},
    "/v1/tools/{name}/grant": {"version": 1, "allow": ["evil.example:443"], "reason": "x"},
}


#: What another tenant's operate token gets where the path names no session nor
#: operation of acme's (those are 403 and 404): lists are filtered, tool definitions are
#: the deployment's (not a tenant's), registering, changing a grant and metrics need an
#: admin/unscoped token.
EXPECTED: dict[tuple[str, str], int] = {
    ("GET", "/v1/sessions"): 200,
    ("GET", "/v1/questions"): 200,
    ("GET", "/v1/operations"): 200,
    ("GET", "/v1/tools"): 200,
    ("GET", "/v1/tools/{name}"): 404,
    ("POST", "/v1/tools"): 403,
    ("POST", "/v1/tools/{name}/grant"): 403,
    ("GET", "/metrics"): 403,
}


def routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path template) of an app's OpenAPI document (which lists all)."""
    return [
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
        if path != "/healthz"
    ]


def filled(path: str, tenant: str) -> str:
    values = {
        "session_id": f"{tenant}:s1",
        "operation_id": f"op-{tenant}",
        "name": "act",
        "path": "README.md",
    }
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


async def test_a_token_of_one_tenant_reaches_nothing_of_another_on_any_route(
    apis: Apis,
) -> None:
    seen = 0
    for which, app in (("hands", apis.hands_app), ("sessions", apis.sessions_app)):
        for method, template in routes(app):
            path = filled(template, "acme")
            body = BODIES.get(template)
            async with apis.client(which, GLOBEX_OPS) as globex:
                if "events" in template:
                    async with globex.stream(method, path) as streamed:
                        status, text = streamed.status_code, (await streamed.aread()).decode()
                else:
                    response = await globex.request(method, path, json=body)
                    status, text = response.status_code, response.text
            seen += 1
            expected = EXPECTED.get((method, template))
            if expected is None:
                expected = 403 if "{session_id}" in template else 404
            assert status == expected, (method, template, status, text[:300])
            if "{session_id}" not in template:  # nothing of acme's session leaks
                assert "acme:s1" not in text, (method, template, text[:300])
    assert seen >= 13
    # Nothing of acme's changed.
    acme = await apis.store.get_operation("op-acme")
    assert acme is not None and acme.status is OperationStatus.UNCERTAIN
    handle = await apis.store.session("acme:s1")
    assert list(handle.state.submissions) == ["r1"] and not handle.state.documents


#: What another tenant's operate token gets from the console's routes that name no
#: session nor operation of acme's (those are 403 and 404, as on the API): the login
#: form is open (its post, without the form's own cookie, refused), lists are filtered,
#: and the fleet page is the deployment's (issue 31: it showed a tenant every host).
CONSOLE_EXPECTED: dict[tuple[str, str], int] = {
    ("GET", "/console/login"): 200,
    ("POST", "/console/login"): 403,
    ("POST", "/console/logout"): 303,
    ("GET", "/console/static/{name}"): 200,
    ("GET", "/console"): 303,
    ("GET", "/console/sessions"): 200,
    ("GET", "/console/fleet"): 403,
}


def console_routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path template) of the console (left out of the OpenAPI document),
    as ``console_router`` makes them for the app."""
    router = console_router(app.state.context, GRANTS, None)
    return [
        (method, route.path)
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in sorted(route.methods - {"HEAD"})
    ]


async def test_a_token_of_one_tenant_reaches_nothing_of_another_in_the_console(
    apis: Apis,
) -> None:
    globex = next(grant for grant in GRANTS if grant.name == "globex-ops")
    form = {"csrf": csrf_token(globex), "request_id": "r1", "question_id": "q1", "value": "x"}
    form |= {"at": "1", "into": "globex:fork", "outcome": "failed", "reason": "x"}
    seen = 0
    async with apis.client("sessions", GLOBEX_OPS) as client:
        for method, template in console_routes(apis.sessions_app):
            path = filled(template.replace("{name}", "console.js"), "acme")
            body = form if method == "POST" else None
            response = await client.request(method, path, data=body)
            seen += 1
            expected = CONSOLE_EXPECTED.get((method, template))
            if expected is None:
                expected = 403 if "{session_id}" in template else 404
            assert response.status_code == expected, (method, template, response.text[:300])
            if "{session_id}" not in template:
                assert "acme:s1" not in response.text, (method, template)
    assert seen >= 15
    acme = await apis.store.get_operation("op-acme")
    assert acme is not None and acme.status is OperationStatus.UNCERTAIN
    handle = await apis.store.session("acme:s1")
    assert list(handle.state.submissions) == ["r1"] and not handle.state.documents
    assert (await apis.store.session("globex:fork")).seq == 0


async def test_one_hands_token_cannot_list_another_tenants_sessions_nor_read_results(
    apis: Apis,
) -> None:
    async with apis.client("hands", GLOBEX_READ) as globex:
        await apis.store.index.mark("acme:s1")
        await apis.store.index.mark("globex:s1")
        listed = (await globex.get("/v1/operations")).json()
        assert [op["operation_id"] for op in listed["operations"]] == ["op-globex"]
        assert (await globex.get("/v1/operations?session=acme:s1")).status_code == 403
        assert (await globex.get("/v1/operations/op-acme")).status_code == 404
        own = await globex.get("/v1/operations/op-globex")
        assert own.status_code == 200 and own.json()["session_id"] == "globex:s1"
    async with apis.client("sessions", GLOBEX_READ) as globex:
        listed = (await globex.get("/v1/sessions")).json()
        assert [s["session_id"] for s in listed["sessions"]] == ["globex:s1"]
        assert (await globex.get("/v1/sessions/acme:s1")).status_code == 403
        assert (await globex.get("/v1/sessions/globex:s1")).status_code == 200
    async with apis.client("hands", ADMIN) as admin:  # the unscoped token sees both
        listed = (await admin.get("/v1/operations")).json()
        assert sorted(op["operation_id"] for op in listed["operations"]) == [
            "op-acme",
            "op-globex",
        ]


async def test_a_read_token_cannot_act(apis: Apis) -> None:
    async with apis.client("hands", ACME_READ) as reader:
        for action, body in (("cancel", {"reason": "x"}), ("verify", None)):
            response = await reader.post(f"/v1/operations/op-acme/{action}", json=body)
            assert response.status_code == 403, response.text
            error = response.json()["error"]
            assert error["code"] == "forbidden" and "operate" in error["message"]
        assert (await reader.get("/v1/operations/op-acme")).status_code == 200
    async with apis.client("sessions", ACME_READ) as reader:
        submit = await reader.post(
            "/v1/sessions/acme:s1/submissions", json={"request_id": "r2", "input": "x"}
        )
        assert submit.status_code == 403 and submit.json()["error"]["code"] == "forbidden"
        cancel = await reader.post("/v1/sessions/acme:s1/cancel", json={"request_id": "r1"})
        assert cancel.status_code == 403
    acme = await apis.store.get_operation("op-acme")
    assert acme is not None and acme.status is OperationStatus.UNCERTAIN
    handle = await apis.store.session("acme:s1")
    assert list(handle.state.submissions) == ["r1"] and not handle.state.documents
    # An operate token of the tenant can.
    async with apis.client("sessions", ACME_OPS) as ops:
        submit = await ops.post(
            "/v1/sessions/acme:s1/submissions", json={"request_id": "r2", "input": "x"}
        )
        assert submit.status_code == 201, submit.text
    async with apis.client("hands", ACME_OPS) as ops:
        # allowed (an uncertain operation stays for an operator's settle: 202)
        cancelled = await ops.post("/v1/operations/op-acme/cancel", json={"reason": "x"})
        assert cancelled.status_code == 202 and cancelled.json()["status"] == "uncertain"
        settled = await ops.post(
            "/v1/operations/op-acme/settle", json={"outcome": "failed", "reason": "checked"}
        )
        assert settled.status_code == 200, settled.text
        assert (await ops.post("/v1/tools", json={"image": "x"})).status_code == 403


def test_tokens_come_from_the_environment_and_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("BH_HANDS_API_TOKEN", "BH_HANDS_API_TOKENS_FILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidInput, match="BH_HANDS_API_TOKENS_FILE"):
        grants_from_env("BH_HANDS_API", "Hands API")
    monkeypatch.setenv("BH_HANDS_API_TOKEN", ADMIN)
    (single,) = grants_from_env("BH_HANDS_API", "Hands API")
    assert single.access == "admin" and single.sessions == () and single.name == "default"

    tokens = tmp_path / "tokens.json"
    entries = [
        {"name": "acme-reader", "token": ACME_READ, "access": "read", "tenants": ["acme"]},
        {"name": "ops", "token": ACME_OPS, "access": "operate"},
    ]
    tokens.write_text(json.dumps({"tokens": entries}))
    tokens.chmod(0o644)
    monkeypatch.setenv("BH_HANDS_API_TOKENS_FILE", str(tokens))
    with pytest.raises(InvalidInput, match="0600"):
        grants_from_env("BH_HANDS_API", "Hands API")
    tokens.chmod(0o600)
    grants = grants_from_env("BH_HANDS_API", "Hands API")
    assert [g.name for g in grants] == ["default", "acme-reader", "ops"]
    assert grants[1].covers("acme:x") and not grants[1].covers("globex:x")
    assert grants[2].covers("anything") and not grants[2].may("admin")

    entries.append({"name": "ops", "token": "another-token-0123456789", "access": "read"})
    tokens.write_text(json.dumps({"tokens": entries}))
    with pytest.raises(InvalidInput, match="ops"):
        grants_from_env("BH_HANDS_API", "Hands API")
    tokens.write_text(json.dumps({"tokens": [{"name": "x", "token": "short", "access": "read"}]}))
    with pytest.raises(InvalidInput, match="16"):
        grants_from_env("BH_HANDS_API", "Hands API")


@pytest.mark.parametrize(
    ("mode", "accepted"),
    [(0o600, True), (0o400, True), (0o440, True), (0o640, True), (0o644, False), (0o660, False)],
)
def test_a_tokens_file_may_be_group_readable_as_kubernetes_mounts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int, accepted: bool
) -> None:
    """A Secret mounted for a non-root pod (``fsGroup``) is 0440 whatever mode was asked
    for; readable or writable by others, or writable by the group, is still refused —
    the same rule as the password files (``runtime.credentials.read_secret``)."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps({"tokens": [{"name": "ops", "token": ACME_OPS, "access": "read"}]})
    )
    tokens.chmod(mode)
    monkeypatch.delenv("BH_HANDS_API_TOKEN", raising=False)
    monkeypatch.setenv("BH_HANDS_API_TOKENS_FILE", str(tokens))
    if accepted:
        assert [g.name for g in grants_from_env("BH_HANDS_API", "Hands API")] == ["ops"]
    else:
        with pytest.raises(InvalidInput, match="others"):
            grants_from_env("BH_HANDS_API", "Hands API")
