"""The shipped tool images: labels that declare a valid tool, builds that skip what is up
to date, tools that follow the I/O contract in a hardened container, and ``send-email``
against the real example email service."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import httpx
import jsonschema
import pytest
from typer.testing import CliRunner

from bh import images_commands as images_cli
from contracts import ReplayPolicy
from contracts.tool import LABEL_PREFIX, RECIPE_LABEL
from examples.emails.tasks import SEND_EMAIL_SPEC
from hands.images import (
    BUILD_HASH_LABEL,
    SANDBOX_IMAGES,
    build_hash,
    build_images,
    recipe_digest,
    tool_directories,
    tool_tag,
)
from hands.labels import definition_from_labels
from tests.support.http_server import free_port
from tests.support.images import run_hardened, tool_images
from tests.support.processes import ROOT

pytestmark = pytest.mark.docker

# Directory → (tool name, replay policy): a new recipe must be added here on purpose.
SHIPPED = {
    "count": ("count", ReplayPolicy.UNSAFE),
    "echo": ("echo", ReplayPolicy.SAFE),
    "edit-file": ("edit_file", ReplayPolicy.SAFE),
    "fail": ("fail", ReplayPolicy.SAFE),
    "http-get": ("http_get", ReplayPolicy.SAFE),
    "misbehave": ("misbehave", ReplayPolicy.SAFE),
    "python-exec": ("python_exec", ReplayPolicy.UNSAFE),
    "send-email": ("send_email", ReplayPolicy.UNSAFE),
    "shell": ("shell", ReplayPolicy.UNSAFE),
    "sleep": ("sleep", ReplayPolicy.SAFE),
    "workspace-run": ("run_command", ReplayPolicy.SAFE),
    "workspace-write": ("write_files", ReplayPolicy.SAFE),
}
DECLARED = [
    "name",
    "version",
    "description",
    "schema",
    "replay",
    "timeout",
    "cpus",
    "memory",
    "pids",
    "scratch",
    "output-limit",
    "network",
    "command",
]
EMAIL_TOKEN = "images-test-token-5c1a"
#: no route from a container without a network: the count tool's ledger never answers
_LEDGER = {"LEDGER_URL": "http://192.0.2.1:80"}


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    return tool_images()


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.from_env()
    yield client
    client.close()


def test_every_recipe_is_a_shipped_tool() -> None:
    assert sorted(tool_directories()) == sorted(SHIPPED)


@pytest.mark.parametrize("directory", sorted(SHIPPED))
def test_each_image_declares_a_valid_tool(
    images: dict[str, str], engine: Any, directory: str
) -> None:
    tag = tool_tag(directory)
    image = engine.images.get(tag)
    labels = image.labels
    assert [name for name in DECLARED if not labels.get(LABEL_PREFIX + name)] == []
    definition = definition_from_labels(tag, image.id, labels)
    assert (definition.name, definition.replay) == SHIPPED[directory]
    assert definition.version == 1
    assert definition.parameters["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(definition.parameters)
    assert definition.network.is_none  # destinations are granted at registration only
    assert definition.command == ("python3", "/opt/bh/tool.py")
    assert definition.queryable == (directory in ("count", "send-email"))
    base_id = images["brainhands/base:bookworm"]
    path = SANDBOX_IMAGES / "tools" / directory
    assert labels[BUILD_HASH_LABEL] == build_hash(path, base_id=base_id)
    assert labels[RECIPE_LABEL] == recipe_digest(path)  # the same on any base


def test_send_email_takes_the_arguments_of_the_in_process_tool(
    images: dict[str, str], engine: Any
) -> None:
    labels = engine.images.get(tool_tag("send-email")).labels
    assert json.loads(labels[LABEL_PREFIX + "schema"]) == SEND_EMAIL_SPEC.parameters
    assert float(labels[LABEL_PREFIX + "timeout"]) == SEND_EMAIL_SPEC.timeout.total_seconds()


async def test_a_second_build_skips_every_image(images: dict[str, str]) -> None:
    again = await build_images()
    assert {tag: image.image_id for tag, image in again.items()} == images
    assert [tag for tag, image in again.items() if not image.skipped] == []


async def test_a_changed_recipe_is_built_again(
    images: dict[str, str], engine: Any, tmp_path: Path
) -> None:
    shutil.copytree(SANDBOX_IMAGES / "base", tmp_path / "base")
    recipe = tmp_path / "tools" / "echo-rebuild-check"
    shutil.copytree(SANDBOX_IMAGES / "tools" / "echo", recipe)
    # Unlike the shipped echo, so that no build here can share an image with it.
    _append(recipe / "tool.py", "# a copy for test_a_changed_recipe_is_built_again\n")
    tag = tool_tag(recipe.name)
    first = (await build_images(names=[recipe.name], root=tmp_path))[tag]
    try:
        again = (await build_images(names=[recipe.name], root=tmp_path))[tag]
        _append(recipe / "tool.py", "# changed\n")
        changed = (await build_images(names=[recipe.name], root=tmp_path))[tag]
        assert again.skipped and again.image_id == first.image_id
        assert not changed.skipped and changed.image_id != first.image_id
        labels = [
            (await asyncio.to_thread(engine.images.get, i.image_id)).labels
            for i in (first, changed)
        ]
        assert labels[0][RECIPE_LABEL] != labels[1][RECIPE_LABEL]
    finally:
        await asyncio.to_thread(engine.images.remove, tag)
        with contextlib.suppress(docker.errors.ImageNotFound):
            await asyncio.to_thread(engine.images.remove, first.image_id)


def _append(path: Path, text: str) -> None:
    with path.open("a") as file:
        file.write(text)


def test_the_cli_builds_what_is_asked_and_lists_the_tools(images: dict[str, str]) -> None:
    runner, wide = CliRunner(), {"COLUMNS": "200"}
    built = runner.invoke(images_cli.app, ["build", "echo", "send_email"], env=wide)
    assert built.exit_code == 0, built.output
    assert "3 images ready (0 built, 3 up to date)" in built.output
    listed = runner.invoke(images_cli.app, ["list"], env=wide)
    assert "brainhands/tool-send-email:latest" in listed.output
    assert "send_email@1" in listed.output
    unknown = runner.invoke(images_cli.app, ["build", "no-such-tool"], env=wide)
    assert unknown.exit_code == 2
    assert "not_found: no tool recipe named no-such-tool" in unknown.output


def test_echo_answers_in_a_hardened_container(images: dict[str, str]) -> None:
    status, stdout = run_hardened(tool_tag("echo"), {"message": "hi"})
    assert (status, json.loads(stdout)) == (0, {"echo": {"message": "hi"}, "operation_id": "op-1"})


@dataclass(frozen=True)
class Case:
    directory: str
    args: Any
    status: int
    output: Any = None
    keys: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)


CASES = [
    Case("sleep", {"seconds": 0}, 0, {"slept": 0}),
    Case("fail", {"code": 3, "message": "no"}, 3, {"error": "no"}),
    Case(
        "shell",
        {"command": "echo out; echo err >&2; touch /tmp/ok && exit 4"},
        0,
        {"exit_code": 4, "stdout": "out\n", "stderr": "err\n", "truncated": False},
    ),
    Case(
        "python-exec",
        {"code": "print('x')\nresult = [1, 2]"},
        0,
        {"stdout": "x\n", "truncated": False, "result": [1, 2]},
    ),
    Case("python-exec", {"code": "1 / 0"}, 1, keys=("error", "stdout", "traceback", "truncated")),
    Case("misbehave", {"action": "exit", "code": 7}, 7, {"exit": 7}),
    # without a mounted workspace (docs/workspaces.md) these refuse, naming what is missing
    Case("edit-file", {"path": "a.py", "content": ""}, 1, keys=("error",)),
    Case("workspace-run", {"command": "true"}, 1, keys=("error",)),
    Case("workspace-write", {"files": {"a.py": ""}}, 1, keys=("error",)),
    Case("count", {"fail": True}, 3, {"error": "asked to fail"}, environment=_LEDGER),
    Case("count", {}, 75, keys=("error",), environment=_LEDGER),
    Case("http-get", {"url": "http://192.0.2.1/"}, 1, keys=("error",)),
    Case(
        "send-email",
        {"to": "a@example.com", "subject": "s", "body": "b"},
        75,
        keys=("error", "outcome", "operation_id"),
        environment={"EMAIL_SERVICE_URL": "http://192.0.2.1:80"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.directory}-{case.status}")
def test_tools_follow_the_io_contract(images: dict[str, str], engine: Any, case: Case) -> None:
    tag = tool_tag(case.directory)
    schema = json.loads(engine.images.get(tag).labels[LABEL_PREFIX + "schema"])
    jsonschema.validate(case.args, schema)
    status, stdout = run_hardened(tag, case.args, environment=case.environment)
    output = json.loads(stdout)
    assert status == case.status, stdout
    if case.output is not None:
        assert output == case.output
    assert sorted(output) == sorted(case.keys or output)


# send-email's logic, run on the host against the real service.


class _Proxy(ThreadingHTTPServer):
    """A forward proxy that adds the service's bearer token, as the egress proxy does,
    and remembers which headers the tool sent."""

    def __init__(self, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.token = token
        self.seen: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: _Proxy

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        self.server.seen.append(dict(self.headers))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = urllib.request.Request(self.path, data=body or None, method=self.command)
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Bearer {self.server.token}")
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with direct.open(request, timeout=10) as response:
                status, answer = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, answer = error.code, error.read()
        except OSError:
            self.close_connection = True  # no answer upstream: none downstream either
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@dataclass(frozen=True)
class Email:
    url: str
    proxy: _Proxy

    def tool(self, args: Any, *, mode: str = "run", op: str = "op-1", proxy: bool = True) -> Any:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "BH_OPERATION_ID": op,
            "BH_MODE": mode,
            "BH_ARGUMENTS": json.dumps(args),
            "EMAIL_SERVICE_URL": self.url,
        }
        if proxy:
            env["HTTP_PROXY"] = env["http_proxy"] = self.proxy.url
        script = SANDBOX_IMAGES / "tools" / "send-email" / "tool.py"
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=30
        )
        return done.returncode, json.loads(done.stdout)

    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        auth = {"Authorization": f"Bearer {EMAIL_TOKEN}"}
        response = httpx.request(method, self.url + path, headers=auth, timeout=10, **kwargs)
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module")
def email() -> Iterator[Email]:
    service = subprocess.Popen(
        [sys.executable, "-m", "examples.emails.service", "--port", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "BH_EMAIL_SERVICE_TOKEN": EMAIL_TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert service.stdout is not None
    line = service.stdout.readline()
    proxy = _Proxy(EMAIL_TOKEN)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        assert line.startswith("listening on "), line
        yield Email(line.removeprefix("listening on ").strip(), proxy)
    finally:
        proxy.shutdown()
        proxy.server_close()
        service.terminate()
        service.communicate(timeout=10)


MESSAGE = {"to": "ada@example.com", "subject": "Notice", "body": "Hello"}


def test_send_email_sends_once_and_its_query_finds_the_message(email: Email) -> None:
    status, receipt = email.tool(MESSAGE, op="op-send")
    assert status == 0
    assert receipt == {
        "operation_id": "op-send",
        "message_id": receipt["message_id"],
        "status": "sent",
        "to": "ada@example.com",
    }
    assert email.tool(MESSAGE, op="op-send") == (0, receipt)  # a repeat is the same send
    assert email.tool(None, mode="query", op="op-send") == (0, {"found": True, "output": receipt})
    assert email.tool(None, mode="query", op="op-never") == (0, {"found": False, "output": None})
    assert email.admin("GET", "/ledger")["requests"]["op-send"] == 2
    assert all("Authorization" not in headers for headers in email.proxy.seen)


def test_send_email_reports_a_refusal_with_the_service_message(email: Email) -> None:
    status, output = email.tool(MESSAGE, op="op-refused", proxy=False)
    assert status == 1
    assert output["status"] == 401
    assert "refused POST /messages (HTTP 401): missing or wrong bearer token" in output["error"]
    status, output = email.tool(None, mode="query", op="op-refused", proxy=False)
    assert (status, output["status"]) == (1, 401)


def test_send_email_reports_an_unknown_outcome_and_the_query_settles_it(email: Email) -> None:
    email.admin("POST", "/faults", json={"drop_responses": 1, "hold_seconds": 0.2})
    status, output = email.tool(MESSAGE, op="op-lost")
    assert (status, output["outcome"], output["operation_id"]) == (75, "unknown", "op-lost")
    assert "may or may not have been sent" in output["error"]
    status, answer = email.tool(None, mode="query", op="op-lost")
    assert (status, answer["found"], answer["output"]["operation_id"]) == (0, True, "op-lost")


def test_send_email_without_a_service_is_an_unknown_outcome(email: Email) -> None:
    nowhere = Email(f"http://127.0.0.1:{free_port()}", email.proxy)
    status, output = nowhere.tool(MESSAGE, proxy=False)
    assert (status, output["outcome"]) == (75, "unknown")
    assert "Connection refused" in output["error"]


def test_importing_a_root_filesystem_leaves_no_pipe_open(tmp_path: Path) -> None:
    """``bh.infra_images`` pipes ``tar`` into ``docker import``: the pipe is closed
    after, or the first build on a fresh machine dies of an unraisable ResourceWarning
    (the compose test's setup failed so in CI)."""
    import gc
    import warnings

    from bh.infra_images import _import
    from tests.support.images import require_docker

    require_docker()
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text("tiny\n")
    tag = "brainhands/test-import:pipe"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _import(root, tag, "test")
        gc.collect()
    client = docker.from_env()
    try:
        assert client.images.get(tag).labels
    finally:
        client.images.remove(tag, force=True)
        client.close()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
