"""The Hands HTTP API over real HTTP: uvicorn on a free loopback port, a SQLite store,
the process sandbox, and operations run by a real executor.

Tool images are stood in for by a process sandbox that also knows a few images' labels
(registering real images is tested with Docker); everything else is the real thing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from bh import ops_commands, tools_commands
from bh.hands_client import HandsClient
from bus import CANCEL_SUBJECT, Bus, dispatch_subject
from bus.backlog import HANDS_CONSUMER as METRICS_CONSUMER
from contracts import AlreadyExists, NotFound, Operation, OperationStatus, ReplayPolicy
from contracts.errors import Unauthorized
from contracts.tool import LABEL_PREFIX, RECIPE_LABEL, Cancellation, Dispatch, ResultEvent
from hands.api.app import create_app
from hands.api.registration import UNGRANTED_HEADER
from hands.executor import Executor
from hands.labels import ToolCaps
from hands.metrics import HandsMetrics
from hands.sandbox import RunState
from hands.sandbox.process import ProcessSandbox
from hands.service import CONSUMER as SERVICE_CONSUMER
from session_store import SessionStore, open_store
from tests.support.eventually import assert_eventually
from tests.support.http_server import free_port, serve
from tests.support.intents import CommittingExecutor
from tests.support.processes import ROOT
from tests.support.toolpath import ledger_tool, runs, scratch_bus

pytestmark = pytest.mark.sqlite

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RECIPE = "sha256:" + "e" * 64
MAIL = "mail.internal:8025"

# Reports whether the ledger holds the operation id (the tool's query entry point).
QUERY = """
import json, os
path = os.environ["LEDGER"]
seen = open(path).read().split() if os.path.exists(path) else []
found = os.environ["BH_OPERATION_ID"] in seen
print(json.dumps({"found": found, "output": {"op": os.environ["BH_OPERATION_ID"]}}))
"""


def labels(recipe: str | None = None, **overrides: str) -> dict[str, str]:
    declared = {
        "name": "greet",
        "version": "1",
        "schema": json.dumps({"type": "object"}),
        "replay": "safe",
        "timeout": "10",
        **overrides,
    }
    found = {LABEL_PREFIX + key: value for key, value in declared.items()}
    return found if recipe is None else {**found, RECIPE_LABEL: recipe}


class LabelledSandbox(ProcessSandbox):
    """The process sandbox, knowing a few images by tag (it has no engine)."""

    IMAGES: ClassVar[dict[str, tuple[str, dict[str, str]]]] = {
        "test/greet:1": ("sha256:" + "1" * 64, labels()),
        "test/greet:rebuilt": ("sha256:" + "2" * 64, labels()),
        "test/unlabelled": ("sha256:" + "3" * 64, labels(replay="sometimes")),
        # built by `bh images build` (a recipe label): rebuilt, and from changed code
        "test/built:1": ("sha256:" + "4" * 64, labels(name="built", recipe=RECIPE)),
        "test/built:rebuilt": ("sha256:" + "5" * 64, labels(name="built", recipe=RECIPE)),
        "test/built:changed": ("sha256:" + "6" * 64, labels(name="built", recipe="sha256:f")),
        # an image that names its own destinations: shown to the operator, never granted
        "test/mailer:1": ("sha256:" + "7" * 64, labels(name="mailer", network=MAIL)),
    }

    async def image_id(self, image: str) -> str:
        return self._image(image)[0]

    async def image_labels(self, image: str) -> dict[str, Any]:
        return dict(self._image(image)[1])

    def _image(self, image: str) -> tuple[str, dict[str, str]]:
        if image == "test/broken":
            raise RuntimeError("engine socket /secret/path exploded")
        if image not in self.IMAGES:
            raise NotFound(f"image {image} is not on this engine", image=image)
        return self.IMAGES[image]


@dataclass
class Api:
    url: str
    http: httpx.AsyncClient
    store: SessionStore
    sandbox: LabelledSandbox
    executor: Executor
    metrics: HandsMetrics
    ledger: Path
    events: list[ResultEvent]

    async def run(self, operation_id: str, tool: str = "act", **args: Any) -> None:
        result = await self.executor.handle(dispatch(operation_id, tool, **args))
        assert result is not None
        self.metrics.observe(result, tool=tool)  # the executor's own call, once the lead wires it

    def client(self, token: str = TOKEN) -> HandsClient:
        return HandsClient(self.url, token)


def dispatch(operation_id: str, tool: str = "act", **args: Any) -> Dispatch:
    return Dispatch(
        operation_id=operation_id,
        session_id="s1",
        task_id="t1",
        tool=tool,
        tool_version=1,
        args=args or {"message": "hi"},
    )


@asynccontextmanager
async def open_api(tmp_path: Path, bus: Bus | None) -> AsyncIterator[Api]:
    """The API over real HTTP, with a store holding the tools ``act`` and ``lookup``."""
    ledger = tmp_path / "ledger"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    await store.tools.register(ledger_tool("act", ledger))
    queryable = ledger_tool("lookup", ledger, ReplayPolicy.UNSAFE)
    await store.tools.register(
        queryable.model_copy(update={"query": (sys.executable, "-c", QUERY)})
    )
    sandbox = LabelledSandbox(tmp_path / "runs")
    events: list[ResultEvent] = []

    async def publish(event: ResultEvent) -> None:
        events.append(event)

    executor = CommittingExecutor(
        store=store, sandbox=sandbox, publish=publish, executor_id="hands-api"
    )
    metrics = HandsMetrics()
    app = create_app(
        store=store,
        executor=executor,
        sandbox=sandbox,
        bus=bus,
        token=SecretStr(TOKEN),
        metrics=metrics,
    )
    try:
        async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            yield Api(url, http, store, sandbox, executor, metrics, ledger, events)
    finally:
        await store.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, None) as opened:
        yield opened


ROUTES = [
    ("GET", "/v1/operations/op-1", None),
    ("GET", "/v1/operations?session=s1", None),
    ("POST", "/v1/operations/op-1/cancel", {"reason": "x"}),
    ("POST", "/v1/operations/op-1/verify", None),
    ("POST", "/v1/tools", {"image": "test/greet:1"}),
    ("GET", "/v1/tools", None),
    ("GET", "/v1/tools/act", None),
    ("POST", "/v1/tools/act/grant", {"version": 1, "allow": [], "reason": "x"}),
    ("GET", "/v1/tools/act/history", None),
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
    ("GET", "/v1/no-such-route", None),
    ("POST", "/v1/tools", "{not json"),
]


async def test_every_route_but_healthz_needs_the_token(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        health = await anonymous.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        for method, path, body in ROUTES:
            for headers in (
                {},
                {"Authorization": "Bearer wrong-token"},
                {"Authorization": f"Basic {TOKEN}"},
                {"Authorization": f"Bearer{TOKEN}"},
            ):
                kwargs: dict[str, Any] = {"headers": headers}
                if isinstance(body, str):
                    kwargs["content"] = body
                elif body is not None:
                    kwargs["json"] = body
                response = await anonymous.request(method, path, **kwargs)
                assert response.status_code == 401, (method, path, headers)
                error = response.json()["error"]
                assert error["code"] == "unauthorized"
                assert TOKEN not in response.text
                assert response.headers["www-authenticate"].startswith("Bearer")
    assert runs(api.ledger) == [] and await api.store.tools.get("greet") is None
    assert len(await api.store.tools.history("act", 1)) == 1  # no grant changed


async def test_an_operation_run_by_the_executor_is_read_and_listed(api: Api) -> None:
    await api.run("op-1", message="hello")
    await api.run("op-2", exit=3)
    response = await api.http.get("/v1/operations/op-1")
    assert response.status_code == 200
    view = response.json()
    assert view["status"] == "succeeded" and view["tool"] == "act" and view["tool_version"] == 1
    assert view["attempts"] == 1 and view["executor"] == "hands-api"
    assert view["created_at"] and view["updated_at"] and view["deadline"]
    result = view["result"]
    assert result["succeeded"] is True and result["exit_code"] == 0
    assert result["termination"] == "exited" and result["path"] == "executed"
    assert result["output"] == {"echo": "hello", "op": "op-1"}
    assert result["container"] == "bh-op-1" and result["started_at"] and result["finished_at"]
    failed = (await api.http.get("/v1/operations/op-2")).json()
    assert failed["status"] == "failed" and failed["result"]["error"]["code"] == "tool_failed"

    listed = (await api.http.get("/v1/operations", params={"session": "s1"})).json()
    assert [op["operation_id"] for op in listed["operations"]] == ["op-1", "op-2"]
    assert listed["truncated"] is False and "result" not in listed["operations"][0]
    only_failed = await api.http.get("/v1/operations?session=s1&status=failed")
    assert [op["operation_id"] for op in only_failed.json()["operations"]] == ["op-2"]
    limited = (await api.http.get("/v1/operations?session=s1&limit=1")).json()
    assert len(limited["operations"]) == 1 and limited["truncated"] is True
    # Without a session, the active sessions are scanned.
    assert (await api.http.get("/v1/operations")).json()["operations"] == []
    await api.store.index.mark("s1")
    scanned = (await api.http.get("/v1/operations?status=succeeded")).json()
    assert [op["operation_id"] for op in scanned["operations"]] == ["op-1"]
    assert scanned["sessions_scanned"] == 1


async def test_an_unknown_operation_or_tool_is_404(api: Api) -> None:
    for method, path in (
        ("GET", "/v1/operations/nope"),
        ("POST", "/v1/operations/nope/cancel"),
        ("POST", "/v1/operations/nope/verify"),
        ("GET", "/v1/tools/nope"),
        ("GET", "/v1/tools/act?version=2"),
        ("GET", "/v1/no-such-route"),
    ):
        response = await api.http.request(method, path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("GET", "/v1/operations?session=s1&status=done", None, "status"),
        ("GET", "/v1/operations?session=s1&limit=0", None, "limit"),
        ("GET", "/v1/operations?session=-bad", None, "session"),
        ("GET", "/v1/tools/act?version=0", None, "version"),
        ("POST", "/v1/operations/op-1/cancel", {"reason": 5}, "reason"),
        ("POST", "/v1/operations/op-1/cancel", {"reason": "x", "force": True}, "force"),
        ("POST", "/v1/operations/op-1/cancel", "{not json", "(body)"),
        ("POST", "/v1/tools", {}, "image"),
        ("POST", "/v1/tools", {"image": "test/greet:1", "allow": ["no-port"]}, "allow[0]"),
        ("POST", "/v1/tools", {"image": "test/greet:1", "config": {"lower": "x"}}, "config"),
        ("POST", "/v1/tools", [1, 2], "(body)"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    api: Api, method: str, path: str, body: Any, field: str
) -> None:
    kwargs: dict[str, Any] = {}
    if isinstance(body, str):
        kwargs = {"content": body, "headers": {"Content-Type": "application/json"}}
    elif body is not None:
        kwargs = {"json": body}
    response = await api.http.request(method, path, **kwargs)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["details"]["field"].startswith(field)
    assert field in error["message"] or field == "(body)"


async def test_cancel_of_a_running_operation_stops_it_and_leaves_it_uncertain(api: Api) -> None:
    """It had started: the cancel is recorded (202: no result yet), the run is stopped,
    and whether its effect happened is unknown — the record says so."""
    running = asyncio.create_task(api.executor.handle(dispatch("op-1", sleep=30)))

    async def started() -> bool:
        return (api.sandbox.root / "bh-op-1" / "pid").exists()

    await assert_eventually(started)
    pid = int((api.sandbox.root / "bh-op-1" / "pid").read_text())
    assert await api.sandbox.state("op-1") is RunState.RUNNING
    metrics = (await api.http.get("/metrics")).text
    assert "brainhands_hands_containers_running 1.0" in metrics

    response = await api.http.post("/v1/operations/op-1/cancel", json={"reason": "stop it"})
    assert response.status_code == 202, response.text
    assert "stop it" in response.json()["cancel"]

    async def gone() -> bool:
        return not _alive(pid)

    await assert_eventually(gone)
    assert await asyncio.wait_for(running, 10) is None
    assert await api.sandbox.state("op-1") is None
    view = (await api.http.get("/v1/operations/op-1")).json()
    assert view["status"] == "uncertain" and view["result"] is None
    assert runs(api.ledger) == []


async def test_a_settled_operation_keeps_its_result_when_cancelled(api: Api) -> None:
    await api.run("op-1")
    response = await api.http.post("/v1/operations/op-1/cancel", json={"reason": "late"})
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"
    assert response.json()["result"]["termination"] == "exited"


async def test_verify_reports_found_or_not_and_records_what_was_found(api: Api) -> None:
    for operation_id in ("op-1", "op-2"):
        await _uncertain(api.store, operation_id, "lookup")
    api.ledger.write_text("op-1\n")  # op-1 happened; op-2 did not

    found = await api.http.post("/v1/operations/op-1/verify")
    assert found.status_code == 200, found.text
    assert found.json()["found"] is True
    operation = found.json()["operation"]
    assert operation["status"] == "succeeded" and operation["decided_by"] == "hands-api"
    assert operation["result"]["path"] == "verified"
    assert operation["result"]["output"] == {"op": "op-1"}

    missing = await api.http.post("/v1/operations/op-2/verify")
    assert missing.status_code == 200
    assert missing.json()["found"] is False
    assert missing.json()["operation"]["status"] == "uncertain"
    assert missing.json()["operation"]["result"] is None
    assert await api.store.get_operation_result("op-2") is None


async def test_verify_of_a_tool_without_a_query_is_422(api: Api) -> None:
    await _uncertain(api.store, "op-1", "act")
    response = await api.http.post("/v1/operations/op-1/verify")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"
    assert "query" in response.json()["error"]["message"]


async def test_tools_are_registered_once_listed_and_inspected(api: Api) -> None:
    created = await api.http.post("/v1/tools", json={"image": "test/greet:1"})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "greet" and created.json()["image_id"].endswith("1" * 64)
    again = await api.http.post("/v1/tools", json={"image": "test/greet:1"})
    assert again.status_code == 200 and again.json() == created.json()

    other = await api.http.post("/v1/tools", json={"image": "test/greet:rebuilt"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "already_exists"
    granted = await api.http.post(
        "/v1/tools", json={"image": "test/greet:1", "allow": ["api.example.com:443"]}
    )
    assert granted.status_code == 409
    assert granted.json()["error"]["details"]["differs"] == ["allow"]

    unlabelled = await api.http.post("/v1/tools", json={"image": "test/unlabelled"})
    assert unlabelled.status_code == 422
    assert unlabelled.json()["error"]["details"]["label"] == LABEL_PREFIX + "replay"
    missing = await api.http.post("/v1/tools", json={"image": "test/absent"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    listed = (await api.http.get("/v1/tools")).json()["tools"]
    assert [(t["name"], t["version"]) for t in listed] == [("act", 1), ("greet", 1), ("lookup", 1)]
    inspected = (await api.http.get("/v1/tools/lookup?version=1")).json()
    assert inspected["query"] == [sys.executable, "-c", QUERY]
    assert (await api.http.get("/v1/tools/greet")).json() == created.json()


async def test_an_images_network_label_is_shown_never_granted(api: Api) -> None:
    created = await api.http.post("/v1/tools", json={"image": "test/mailer:1"})
    assert created.status_code == 201, created.text
    assert created.json()["network"]["allow"] == []
    assert created.headers[UNGRANTED_HEADER] == MAIL
    tool = await api.store.tools.get("mailer", 1)
    assert tool is not None and tool.network.is_none
    again = await api.http.post("/v1/tools", json={"image": "test/mailer:1"})
    assert again.status_code == 200 and again.headers[UNGRANTED_HEADER] == MAIL
    granted = await api.http.post(
        "/v1/tools/mailer/grant", json={"version": 1, "allow": [MAIL], "reason": "the operator"}
    )
    assert granted.status_code == 201, granted.text
    async with api.client() as hands:
        registration = await hands.register_tool("test/mailer:1")
    assert registration.tool.network.allow == (MAIL,) and registration.ungranted == ()
    assert not registration.created


async def test_an_unexpected_failure_is_500_without_its_internals(api: Api) -> None:
    response = await api.http.post("/v1/tools", json={"image": "test/broken"})
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "error"
    assert "secret" not in response.text and "exploded" not in response.text


async def test_the_process_sandbox_has_no_images_to_register(tmp_path: Path) -> None:
    plain = ProcessSandbox(tmp_path / "runs")
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    executor = CommittingExecutor(store=store, sandbox=plain, publish=_ignore, executor_id="x")
    app = create_app(
        store=store, executor=executor, sandbox=plain, bus=None, token=SecretStr(TOKEN)
    )
    try:
        async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            response = await http.post("/v1/tools", json={"image": "python:3.12"})
    finally:
        await store.close()
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


async def test_the_openapi_document_lists_every_route(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    paths = document["paths"]
    assert set(paths) >= {
        "/healthz",
        "/v1/operations",
        "/v1/operations/{operation_id}",
        "/v1/operations/{operation_id}/cancel",
        "/v1/operations/{operation_id}/verify",
        "/v1/tools",
        "/v1/tools/{name}",
        "/v1/tools/{name}/grant",
        "/v1/tools/{name}/history",
        "/metrics",
    }
    assert "HTTPBearer" in document["components"]["securitySchemes"]
    assert paths["/v1/operations/{operation_id}"]["get"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in paths["/healthz"]["get"]


async def test_metrics_count_operations_by_status_and_termination(api: Api) -> None:
    await api.run("op-1")
    await api.run("op-2", exit=1)
    await api.run("op-3")
    response = await api.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    operations = "brainhands_hands_operations_total"
    assert f'{operations}{{status="succeeded",termination="exited",tool="act"}} 2.0' in text
    assert f'{operations}{{status="failed",termination="exited",tool="act"}} 1.0' in text
    assert 'brainhands_hands_run_seconds_count{termination="exited"} 3.0' in text
    assert "brainhands_hands_containers_running 0.0" in text
    assert "brainhands_hands_queue_pending NaN" in text  # no bus


@pytest.mark.nats
async def test_a_cancel_is_broadcast_for_the_hands_whose_host_runs_it(tmp_path: Path) -> None:
    async with scratch_bus() as bus:
        heard: list[Cancellation] = []

        async def hear(message: Any) -> None:
            heard.append(Cancellation.model_validate_json(message.data))

        subscription = await bus.listen(CANCEL_SUBJECT, hear)
        async with open_api(tmp_path, bus) as api:
            # Claimed and running on another host: nothing of it is here.
            record = await api.store.create_operation(
                Operation(operation_id="op-1", session_id="s1", tool="act", tool_version=1)
            )
            await api.store.transition_operation(
                record, OperationStatus.RUNNING, executor="hands-elsewhere", attempts=1
            )
            response = await api.http.post("/v1/operations/op-1/cancel", json={"reason": "stop"})
            assert response.status_code == 202, response.text
            assert response.json()["status"] == "running" and response.json()["result"] is None

            async def delivered() -> bool:
                return bool(heard)

            await assert_eventually(delivered)
            assert heard == [Cancellation(operation_id="op-1", session_id="s1", reason="stop")]
            metrics = (await api.http.get("/metrics")).text
            assert "brainhands_hands_queue_pending 0.0" in metrics
            assert METRICS_CONSUMER == SERVICE_CONSUMER
        await subscription.unsubscribe()


async def test_the_client_translates_errors_into_the_error_tree(api: Api) -> None:
    await api.run("op-1")
    async with api.client() as hands:
        view = await hands.operation("op-1")
        assert view.status is OperationStatus.SUCCEEDED and view.result is not None
        listed = await hands.operations(session="s1", status=OperationStatus.SUCCEEDED)
        assert [op.operation_id for op in listed.operations] == ["op-1"]
        with pytest.raises(NotFound):
            await hands.operation("nope")
        registered = await hands.register_tool("test/greet:1")
        assert registered.created and registered.tool.ref == "greet@1"
        assert not (await hands.register_tool("test/greet:1")).created
        with pytest.raises(AlreadyExists):
            await hands.register_tool("test/greet:rebuilt")
        assert [t.ref for t in await hands.tools()] == ["act@1", "greet@1", "lookup@1"]
        assert await hands.healthy()
    async with api.client("wrong-token") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.tools()


async def test_the_cli_goes_through_the_api(api: Api, tmp_path: Path) -> None:
    await api.run("op-1")
    env = {"BH_HANDS_API_URL": api.url, "BH_HANDS_API_TOKEN": TOKEN, "BH_STORE_URL": None}
    runner = CliRunner()

    def cli(app: Any, *args: str, **extra: str | None) -> Any:
        return runner.invoke(app, list(args), env={**env, **extra})

    got = await asyncio.to_thread(cli, ops_commands.app, "get", "op-1", "--json")
    assert got.exit_code == 0, got.output
    assert json.loads(got.output)["result"]["output"]["op"] == "op-1"
    shown = await asyncio.to_thread(cli, ops_commands.app, "get", "op-1")
    assert shown.exit_code == 0 and "result.termination" in shown.output
    await _uncertain(api.store, "op-2", "lookup")
    unverified = await asyncio.to_thread(cli, ops_commands.app, "verify", "op-2")
    assert unverified.exit_code == 1 and "not found" in unverified.output
    cancelled = await asyncio.to_thread(cli, ops_commands.app, "cancel", "op-2", "--reason", "no")
    # uncertain: never re-run without an operator, so the cancel leaves it to one
    assert cancelled.exit_code == 0 and "uncertain" in cancelled.output
    listed = await asyncio.to_thread(cli, ops_commands.app, "list", "--session", "s1")
    assert listed.exit_code == 0 and "op-1" in listed.output and "succeeded" in listed.output
    missing = await asyncio.to_thread(cli, ops_commands.app, "get", "nope")
    assert missing.exit_code == 2 and "not_found" in missing.output
    stranger = await asyncio.to_thread(
        cli, ops_commands.app, "list", "--session", "s1", BH_HANDS_API_TOKEN="wrong-token"
    )
    assert stranger.exit_code == 2 and "unauthorized" in stranger.output
    registered = await asyncio.to_thread(cli, tools_commands.app, "register", "test/greet:1")
    assert registered.exit_code == 0 and "greet@1 registered" in registered.output
    tools = await asyncio.to_thread(cli, tools_commands.app, "list", "--json")
    assert [t["name"] for t in json.loads(tools.output)["tools"]] == ["act", "greet", "lookup"]
    # Without an API URL: straight to the store.
    direct = await asyncio.to_thread(
        cli,
        tools_commands.app,
        "inspect",
        "act",
        BH_HANDS_API_URL=None,
        BH_STORE_URL=f"sqlite:///{tmp_path / 'store.db'}",
    )
    assert direct.exit_code == 0 and json.loads(direct.output)["name"] == "act"


def test_the_server_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {**os.environ, "BH_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    env.pop("BH_HANDS_API_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "hands.api_server", "--no-bus", "--sandbox", "process"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "BH_HANDS_API_TOKEN" in done.stderr


async def test_the_server_serves_with_a_token(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "BH_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}",
        "BH_HANDS_API_TOKEN": TOKEN,
        "BH_HANDS_PROCESS_ROOT": str(tmp_path / "runs"),
        "PYTHONUNBUFFERED": "1",
    }
    args = ["--no-bus", "--sandbox", "process", "--port", str(port)]
    server = subprocess.Popen(  # noqa: ASYNC220 (started once; the test polls it over HTTP)
        [sys.executable, "-m", "hands.api_server", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def up() -> bool:
                assert server.poll() is None, server.communicate()[1]
                try:
                    return (await http.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await assert_eventually(up, within=15, interval=0.1)
            assert (await http.get("/v1/tools")).status_code == 401
            tools = await http.get("/v1/tools", headers=AUTH)
            assert tools.status_code == 200 and tools.json() == {"tools": []}
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=15)
    assert server.returncode == 0, stderr
    assert TOKEN not in stderr


async def _uncertain(store: SessionStore, operation_id: str, tool: str) -> None:
    """An operation whose attempt may have run: its executor died before a result."""
    record = await store.create_operation(
        Operation(operation_id=operation_id, session_id="s1", tool=tool, tool_version=1, args={})
    )
    record = await store.transition_operation(
        record, OperationStatus.RUNNING, executor="hands-dead", attempts=1
    )
    await store.transition_operation(record, OperationStatus.UNCERTAIN, reason="executor died")


async def _ignore(event: ResultEvent) -> None:
    return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


async def test_registration_through_the_api_keeps_to_the_operators_caps(tmp_path: Path) -> None:
    """The caps of ``HandsSettings`` reach the API's registration, not only the CLI's."""
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")

    async def publish(event: ResultEvent) -> None:
        return None

    executor = CommittingExecutor(
        store=store,
        sandbox=LabelledSandbox(tmp_path / "runs"),
        publish=publish,
        executor_id="hands-api",
    )
    app = create_app(
        store=store,
        executor=executor,
        sandbox=executor.sandbox,
        bus=None,
        token=SecretStr(TOKEN),
        caps=ToolCaps(timeout_s=0.5),
    )
    try:
        async with serve(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            refused = await http.post("/v1/tools", json={"image": "test/greet:1"})
            assert refused.status_code == 422, refused.text
            assert "at most" in refused.json()["error"]["message"]
            assert (await http.get("/v1/tools")).json() == {"tools": []}
    finally:
        await store.close()


@pytest.mark.nats
async def test_the_dispatch_backlog_and_its_age_are_reported_with_no_hands_running(
    tmp_path: Path,
) -> None:
    """The Hands' autoscaler reads the backlog and how long its oldest dispatch has
    waited from the Hands API, which answers with no Hands running (scale from zero)."""
    async with scratch_bus() as bus, open_api(tmp_path, bus) as api:
        await bus.ensure_streams()
        empty = (await api.http.get("/metrics")).text
        assert "brainhands_hands_queue_oldest_age_seconds 0.0" in empty
        dispatch = Dispatch(
            operation_id="op-waiting",
            session_id="s1",
            task_id="t1",
            tool="act",
            tool_version=1,
            args={},
        )
        await bus.publish(dispatch_subject("act"), dispatch, msg_id="op-waiting")
        await asyncio.sleep(1.5)
        metrics = (await api.http.get("/metrics")).text
        assert "brainhands_hands_queue_pending 1.0" in metrics
        (age,) = [
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("brainhands_hands_queue_oldest_age_seconds ")
        ]
        assert 1.0 <= age < 60, metrics
