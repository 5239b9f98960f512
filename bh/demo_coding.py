"""``bh demo --example coding``: the coding assistant on the whole system, a Brain and a
Hands killed mid-task, the workspace proven whole (``docs/workspaces.md``).

It brings up the infrastructure (``bh dev up``), builds the ``write_files`` and
``run_command`` images once (cached), starts the scripted coder and the system as
separate processes (the scheduler, the Session API, the Hands API, Brains and Hands),
and submits the task through the Session API. The coder writes the ``calc`` package into
the session's workspace, runs its tests (they fail), rewrites the file the failure
names, runs the tests again (they pass) and ends; each change is published as a patch,
each test run's output as a report.

Two processes die by SIGKILL: Brain 1 right after the commit of the edit's intent (its
dispatch never published: the scheduler re-issues it from the store), and Hands 1 as it
starts the second test run (its claim made, the workspace materialised, the container
about to start). Brain 2 and Hands 2 finish the task: the test run is run again from its
base version on Hands 2, the edit is applied once, and the final tree equals the
expected tree byte for byte. The table shows each version: the call that produced it,
what it changed, the Hands that ran it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bh.demo import console
from bh.deploy import service
from bh.fleet import Component, Fleet, from_table, until_up
from bh.session_client import SessionApiClient
from bh.system import await_routes, dev_env, dev_up
from contracts import OperationResult
from contracts.workspace import Artifact, EntryKind, Manifest, WorkspaceVersion
from examples.coding import scenario
from hands.images import build_images, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import SessionStore, open_store
from webapi.server import free_port

SESSION = "coding-demo"
REQUEST = "write-calc"
#: Brain 1 dies between the commit of the edit's intent and its dispatch's publication
BRAIN_CRASH = f"relay:before_publish:tools.dispatch.{scenario.WRITE}#2"
#: Hands 1 stops (SIGSTOP, then the demo's SIGKILL) as it starts its fourth run: the
#: second test run (write, run, write — the edit, re-issued — and run)
HANDS_STOP = "hands:before_start:run#4"
LEASE_SECONDS = 3


@dataclass(frozen=True)
class Deployment:
    session_api: str
    token: str


async def run(store_url: str | None) -> None:
    console.rule("[bold]brainhands demo: a coding assistant's workspace through two crashes")
    console.print("Bringing up the infrastructure (bh dev up: Redis, NATS, Docker)…")
    dev_up()
    infra = dev_env()
    docker_url = infra.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    work = Path(tempfile.mkdtemp(prefix="brainhands-coding-"))
    store_url = store_url or f"sqlite:///{work}/store.db"
    store = await open_store(store_url)
    fleet, deployment = _fleet(work, store_url, infra)
    try:
        await _register(store, docker_url)
        await _run(store, fleet, deployment)
    finally:
        fleet.stop_all()
        await store.close()
    console.print(
        f"Logs: {work}   Read it: [cyan]bh workspace diff {SESSION} --from 0[/] "
        f"(with BH_SESSION_API_URL and a token), or [cyan]bh store inspect {store_url} "
        f"{SESSION}[/]"
    )


def _fleet(work: Path, store_url: str, infra: dict[str, str]) -> tuple[Fleet, Deployment]:
    session_port = free_port()
    token = secrets.token_urlsafe(24)
    model_token = secrets.token_urlsafe(24)
    model_port = free_port()
    env = {
        **os.environ,
        **infra,
        "PYTHONUNBUFFERED": "1",
        "BH_STORE_URL": store_url,
        "BH_NAMESPACE": f"coding{uuid.uuid4().hex[:8]}",
        "BH_SESSION_API_TOKEN": token,
        "BH_HANDS_API_TOKEN": token,
        "BH_HANDS_SECRET": secrets.token_hex(32),
        "BH_HANDS_OWNER": "demo",
        "BH_HANDS_ACK_WAIT": "3",
        "BH_SCRIPTED_MODEL_TOKEN": model_token,
        "BH_MODEL_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
        "BH_MODEL_API_KEY": model_token,
        "BH_MODEL_NAME": scenario.model_name(),
    }
    model = (sys.executable, "-m", "brain.model.scripted", "--script", str(scenario.SCRIPT_PATH))
    brain = ["--sandboxed", scenario.WRITE, "--sandboxed", scenario.RUN]
    brain += ["--lease-seconds", str(LEASE_SECONDS)]
    hands = ("--sandbox", "docker")
    components = [
        Component("model", (*model, "--port", str(model_port))),
        from_table(
            service("scheduler"), "scheduler", ("--reconcile-seconds", "2"), port=free_port()
        ),
        from_table(service("session-api"), "session-api", port=session_port),
        from_table(service("hands-api"), "hands-api", port=free_port()),
        *(from_table(service("brain"), f"brain-{n}", brain, port=free_port()) for n in (1, 2)),
        *(from_table(service("hands"), f"hands-{n}", hands, port=free_port()) for n in (1, 2)),
    ]
    return Fleet(work, env, components), Deployment(f"http://127.0.0.1:{session_port}", token)


async def _register(store: SessionStore, docker_url: str) -> None:
    built = await build_images(docker_url, names=list(scenario.IMAGES))
    config = DockerSandboxConfig(owner="demo", docker_url=docker_url)
    async with DockerSandbox(config) as docker:
        for name in scenario.IMAGES:
            image = built[tool_tag(name)]
            tool = await register_image(store, docker, image.tag, registered_by="bh demo")
            console.print(
                f"Registered [bold]{tool.ref}[/] ({image.tag}, "
                f"{'cached' if image.skipped else 'built'}): workspace "
                f"{tool.workspace.mode.value} at {tool.workspace.path}, no network"
            )


async def _run(store: SessionStore, fleet: Fleet, deployment: Deployment) -> None:
    for name in ("model", "scheduler", "session-api", "hands-api"):
        fleet.start(name)
    hands_one = fleet.start("hands-1", BH_HANDS_ID="hands-1", BH_STOP_AT=HANDS_STOP)
    brain_one = fleet.start("brain-1", BH_CRASH_AT=BRAIN_CRASH)
    await until_up(f"{deployment.session_api}/healthz")
    await asyncio.to_thread(await_routes, fleet.env["BH_REDIS_URL"], fleet.env["BH_NAMESPACE"])
    console.print(
        "\n[bold]1.[/] Running, each its own process: "
        + ", ".join(f"{name} (pid {p.pid})" for name, p in fleet.processes.items())
    )
    async with SessionApiClient(deployment.session_api, deployment.token) as api:
        await api.submit(SESSION, {"text": scenario.MESSAGE}, request_id=REQUEST)
        console.print(f"[bold]2.[/] Submitted through the Session API: “{scenario.MESSAGE}”")
        code = await asyncio.to_thread(brain_one.wait, 180)
        if code != -signal.SIGKILL:
            raise SystemExit(f"brain-1 was expected to be killed, it exited with {code}")
        console.print(
            "   brain-1 [red]killed with SIGKILL[/] right after committing the edit's intent "
            "(its dispatch never published: the scheduler re-issues it from the store)"
        )
        fleet.start("brain-2")
        await _until_stopped(hands_one.pid)
        fleet.kill("hands-1")
        console.print(
            "   hands-1 [red]killed with SIGKILL[/] as it started the second test run "
            "(claimed, its workspace materialised, the container about to start)"
        )
        console.print("[bold]3.[/] hands-2 starts; brain-2 drives the task…")
        started = time.monotonic()
        fleet.start("hands-2", BH_HANDS_ID="hands-2")
        status = await _until_final(api)
        console.print(
            f"   the session finished ({status}) {time.monotonic() - started:.1f} s later"
        )
    await _show(store)


async def _until_stopped(pid: int) -> None:
    """Until the process is stopped (``BH_STOP_AT`` SIGSTOPs it at its point)."""
    deadline = time.monotonic() + 180
    while await asyncio.to_thread(_state, pid) != "T":
        if time.monotonic() > deadline:
            raise SystemExit("hands-1 never reached the second test run (see the logs)")
        await asyncio.sleep(0.1)


def _state(pid: int) -> str:
    """The process's state letter (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


async def _until_final(api: SessionApiClient) -> str:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        view = await api.session(SESSION)
        found = [s for s in view.submissions if s.request_id == REQUEST]
        if found and found[0].status.is_final:
            return found[0].status.value
        await asyncio.sleep(0.5)
    raise SystemExit("the session did not finish within 4 minutes (see the logs)")


async def _show(store: SessionStore) -> None:
    table = Table("commit", "call", "tool", "ran on", "changed", "version", title="Versions")
    applied: list[str] = []
    versions: list[WorkspaceVersion] = []
    previous = Manifest()
    tools: dict[str, str] = {}
    async for record in store.history(SESSION):
        tools |= {intent.operation_id: intent.dispatch.tool for intent in record.commit.intents}
        version = record.commit.workspace
        if version is None or record.claim:
            continue
        result = await _producer(store, record.commit.applied_operations, version)
        manifest = await store.workspaces.manifest(version)
        table.add_row(
            str(record.seq),
            result.operation_id[-12:] if result else "?",
            tools.get(result.operation_id, "?") if result else "?",
            (result.executor or "") if result else "",
            ", ".join(_changed(previous, manifest)) or "(nothing)",
            version.id[:12],
        )
        applied += [result.operation_id] if result else []
        versions.append(version)
        previous = manifest
    console.print(table)
    state = (await store.session(SESSION)).state
    tree = await _tree(store, state.workspace)
    expected = scenario.expected_tree()
    same = tree == expected
    once = len(applied) == len(set(applied))
    artifacts = [
        f"{artifact.name} ({artifact.blob.size} B)"
        for operation_id in applied
        for artifact in (await _result_artifacts(store, operation_id))
    ]
    console.print(f"[bold]Artifacts[/]: {', '.join(artifacts) or 'none'}")
    console.print(
        f"[bold]Answer[/] ({state.submissions[REQUEST].status.value}). "
        f"One version per applied call: {'yes' if once else 'NO'} ({len(versions)}); "
        f"the final tree equals the expected tree byte for byte: {'yes' if same else 'NO'} "
        f"({len(tree)} files)."
    )
    if not (same and once):
        raise SystemExit(1)


async def _producer(
    store: SessionStore, applied: tuple[str, ...], version: WorkspaceVersion
) -> OperationResult | None:
    """The applied result that produced ``version``."""
    for operation_id in applied:
        result = await store.operations.result(operation_id)
        if result is not None and result.version == version:
            return result
    return None


async def _result_artifacts(store: SessionStore, operation_id: str) -> list[Artifact]:
    result = await store.operations.result(operation_id)
    return list(result.artifacts) if result is not None else []


def _changed(before: Manifest, after: Manifest) -> list[str]:
    old = {entry.path: entry for entry in before.entries if entry.kind is EntryKind.FILE}
    new = {entry.path: entry for entry in after.entries if entry.kind is EntryKind.FILE}
    added = [f"+{path}" for path in sorted(new.keys() - old.keys())]
    removed = [f"-{path}" for path in sorted(old.keys() - new.keys())]
    changed = [
        f"~{path}"
        for path in sorted(new.keys() & old.keys())
        if new[path].digest != old[path].digest
    ]
    return added + removed + changed


async def _tree(store: SessionStore, version: WorkspaceVersion | None) -> dict[str, bytes]:
    if version is None:
        return {}
    manifest = await store.workspaces.manifest(version)
    return {
        entry.path: await store.workspaces.file(entry)
        for entry in manifest.entries
        if entry.kind is EntryKind.FILE
    }
