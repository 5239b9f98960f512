"""``bh demo``: the five-emails task on the whole system, a Brain and a Hands killed.

It brings up the infrastructure (``bh dev up``: Redis, NATS, Docker), builds the
``send-email`` image once (cached), starts the example email service and the scripted
model, registers the tool (granted only the email service's host:port; the service's
token stays with the Hands' egress proxy), and starts the system as separate
processes: the scheduler, the Session API, the Hands API, a Hands and a Brain worker.
The task goes in through the Session API. The email service swallows its answer to
email 4; Brain 1 is SIGKILLed right after relaying email 4's dispatch (mid-tool: the
Brain has let go, the tool runs on), and Hands 1 while email 4's container waits for
that answer. Brain 2 and Hands 2 start: no process of the first generation is left.
Hands 2 takes email 4's dispatch over, the scheduler wakes Brain 2 with each result,
and the table shows, per email, how it was recovered (reused / verified / executed),
which Brain dispatched and which applied it, and which container and Hands ran it.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from bh.demo import BATCH, REQUEST, SESSION, Servers, console, servers
from bh.deploy import service
from bh.fleet import Fleet, from_table, until_up
from bh.granted_tool import destination, register_granted, write_credentials
from bh.hands_client import HandsClient
from bh.session_client import SessionApiClient
from bh.system import await_routes, dev_env, dev_up
from examples.emails import scenario
from examples.emails.client import EmailClient
from examples.emails.tasks import notice_operation_id
from hands.sandbox import container_name
from session_store import SessionStore, open_store
from webapi.server import free_port

BRAIN_CRASH = "relay:published:tools.dispatch.send_email#4"
LEASE_SECONDS = 3


@dataclass(frozen=True)
class Deployment:
    """Where the demo's system listens, and its credentials."""

    session_api: str
    hands_api: str
    token: str
    docker_url: str


async def run(store_url: str | None) -> None:
    console.rule("[bold]brainhands demo: the whole system, a Brain and a Hands killed mid-task")
    console.print("Bringing up the infrastructure (bh dev up: Redis, NATS, Docker)…")
    dev_up()
    infra = dev_env()
    docker_url = infra.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    work = Path(tempfile.mkdtemp(prefix="brainhands-demo-"))
    store_url = store_url or f"sqlite:///{work}/store.db"
    async with servers() as running:
        store = await open_store(store_url)
        fleet, deployment = _fleet(work, store_url, running, infra)
        try:
            await _register(store, running, docker_url)
            await _run(store, running, fleet, deployment)
        finally:
            fleet.stop_all()
            await store.close()
    console.print(f"Logs: {work}   Session: [cyan]bh store inspect {store_url} {SESSION}[/]")


def _fleet(
    work: Path, store_url: str, running: Servers, infra: dict[str, str]
) -> tuple[Fleet, Deployment]:
    session_port, hands_port = free_port(), free_port()
    token = secrets.token_urlsafe(24)
    credentials = write_credentials(
        work / "credentials.json", {running.email_url: running.email_token}
    )
    env = running.worker_env(
        **infra,
        BH_STORE_URL=store_url,
        BH_NAMESPACE=f"demo{uuid.uuid4().hex[:8]}",
        BH_SESSION_API_TOKEN=token,
        BH_HANDS_API_TOKEN=token,
        BH_HANDS_SECRET=secrets.token_hex(32),
        BH_HANDS_OWNER="demo",
        BH_HANDS_ACK_WAIT="3",
        BH_HANDS_CREDENTIALS=str(credentials),
    )
    brain = ["--plugin", scenario.PLUGIN, "--sandboxed", "send_email"]
    brain += ["--lease-seconds", str(LEASE_SECONDS)]
    hands = ("--sandbox", "docker")
    components = [
        from_table(
            service("scheduler"), "scheduler", ("--reconcile-seconds", "2"), port=free_port()
        ),
        from_table(service("session-api"), "session-api", port=session_port),
        from_table(service("hands-api"), "hands-api", port=hands_port),
        *(from_table(service("brain"), f"brain-{n}", brain, port=free_port()) for n in (1, 2)),
        *(from_table(service("hands"), f"hands-{n}", hands, port=free_port()) for n in (1, 2)),
    ]
    deployment = Deployment(
        f"http://127.0.0.1:{session_port}",
        f"http://127.0.0.1:{hands_port}",
        token,
        infra.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
    )
    return Fleet(work, env, components), deployment


def _progress(line: str) -> None:
    """The image build's progress (a first base build takes about a minute)."""
    if not line.endswith("up to date"):
        console.print(f"[dim]  {line}[/]", highlight=False)


async def _register(store: SessionStore, running: Servers, docker_url: str) -> None:
    tool, skipped = await register_granted(
        store,
        docker_url,
        "send-email",
        service_url=running.email_url,
        config={"EMAIL_SERVICE_URL": running.email_url},
        owner="demo",
        registered_by="bh demo",
        say=_progress,
    )
    console.print(
        f"Tool image {tool.image} ({tool.image_id[:19]}): {'cached' if skipped else 'built'}"
    )
    console.print(
        f"Registered [bold]{tool.ref}[/] ({tool.replay.value}, query entry point: "
        f"{'yes' if tool.queryable else 'no'}); network: only "
        f"{destination(running.email_url)}, through the "
        "Hands' egress proxy, which holds the email service's token"
    )


async def _run(store: SessionStore, running: Servers, fleet: Fleet, deployment: Deployment) -> None:
    fourth = notice_operation_id(SESSION, BATCH, 3)
    for name in ("scheduler", "session-api", "hands-api"):
        fleet.start(name)
    fleet.start("hands-1", BH_HANDS_ID=f"hands-1:{uuid.uuid4().hex[:6]}")
    first_brain = fleet.start("brain-1", BH_CRASH_AT=BRAIN_CRASH)
    await until_up(f"{deployment.session_api}/healthz")
    await until_up(f"{deployment.hands_api}/healthz")
    await asyncio.to_thread(await_routes, fleet.env["BH_REDIS_URL"], fleet.env["BH_NAMESPACE"])
    console.print(
        "\n[bold]1.[/] Running, each its own process: "
        + ", ".join(f"{name} (pid {p.pid})" for name, p in fleet.processes.items())
    )
    async with (
        EmailClient(running.email_url, running.email_token) as email,
        SessionApiClient(deployment.session_api, deployment.token) as api,
        HandsClient(deployment.hands_api, deployment.token) as hands_api,
    ):
        await email.set_faults(1, hold_seconds=8, operation_id=fourth)
        await api.submit(SESSION, {"text": scenario.REQUEST}, request_id=REQUEST)
        console.print(f"[bold]2.[/] Submitted through the Session API: “{scenario.REQUEST}”")
        console.print("   (the email service will accept email 4 but never answer it)")
        code = await asyncio.to_thread(first_brain.wait, 120)
        if code != -signal.SIGKILL:
            raise SystemExit(f"brain-1 was expected to be killed, it exited with {code}")
        console.print(
            "   brain-1 [red]killed with SIGKILL[/] right after relaying email 4's dispatch "
            "(the tool runs on: no Brain waits for it)"
        )
        await _until_requested(email, fourth)
        state = _container_state(container_name(fourth, namespace="demo"), deployment.docker_url)
        fleet.kill("hands-1")
        console.print(
            f"   hands-1 [red]killed with SIGKILL[/] while email 4's container was "
            f"{state} (email 4 accepted by the service, its answer lost)"
        )
        console.print("[bold]3.[/] brain-2 and hands-2 start; nothing of the first ones runs…")
        started = time.monotonic()
        fleet.start("hands-2", BH_HANDS_ID=f"hands-2:{uuid.uuid4().hex[:6]}")
        fleet.start("brain-2")
        status = await _until_final(api)
        took = time.monotonic() - started
        console.print(f"   the session finished ({status}) {took:.1f} s later")
        await _show(store, email, hands_api, fleet)


async def _until_final(api: SessionApiClient) -> str:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        view = await api.session(SESSION)
        found = [s for s in view.submissions if s.request_id == REQUEST]
        if found and found[0].status.is_final:
            return found[0].status.value
        await asyncio.sleep(0.5)
    raise SystemExit("the session did not finish within 3 minutes (see the logs)")


async def _show(store: SessionStore, email: EmailClient, hands: HandsClient, fleet: Fleet) -> None:
    state = (await store.session(SESSION)).state
    result: Any = state.tasks[BATCH].result
    receipts: list[dict[str, Any]] = result["receipts"]
    ledger = await email.ledger()
    sent = Counter(message.operation_id for message in ledger.messages)
    dispatched, applied = await _writers(store, fleet)
    table = Table(
        "#",
        "recipient",
        "recovered as",
        "dispatched by",
        "container (Hands API)",
        "ran on",
        "applied by",
        "sends",
        title="Per email",
    )
    for number, receipt in enumerate(receipts, start=1):
        operation_id = str(receipt["operation_id"])
        outcome = (await hands.operation(operation_id)).result
        container = (outcome.container or "") if outcome else ""
        table.add_row(
            str(number),
            str(receipt["to"]),
            f"[bold]{receipt['recovery']}[/]",
            dispatched.get(operation_id, "?"),
            container[:19] + "…" + (" (query)" if container.endswith("-query") else ""),
            (outcome.executor or "").split(":")[0] if outcome else "",
            applied.get(operation_id, "?"),
            str(sent[operation_id]),
        )
    console.print(table)
    console.print(
        "   reused = applied before the crash; verified = its container could not tell "
        "whether the email went out, so a Hands ran the tool's query container for its "
        "operation id; executed = sent now"
    )
    once = all(sent[str(r["operation_id"])] == 1 for r in receipts)
    asked = all(ledger.requests.get(str(r["operation_id"])) == 1 for r in receipts)
    submission = state.submissions[REQUEST]
    console.print(
        f"[bold]Answer[/] ({submission.status.value}). Each email sent exactly once: "
        f"{'yes' if once else 'NO'}; requested exactly once: {'yes' if asked else 'NO'}; "
        f"results applied: {len(state.applied_operations)}, once each."
    )


async def _writers(store: SessionStore, fleet: Fleet) -> tuple[dict[str, str], dict[str, str]]:
    """Per operation: which Brain committed its dispatch, which applied its result (the
    commit's fence names the claim, the claim names the holder, the holder its pid)."""
    names = {str(process.pid): name for name, process in fleet.processes.items()}
    holders: dict[int, str] = {}
    dispatched: dict[str, str] = {}
    applied: dict[str, str] = {}
    async for record in store.history(SESSION):
        if record.claim:
            pid = (record.holder or "").split(":")[1:2]
            holders[record.fence] = names.get(pid[0], record.holder or "?") if pid else "?"
            continue
        writer = holders.get(record.writer_fence or 0, "-")
        for message in record.commit.outbox:
            dispatched.setdefault(message.id, writer)
        for operation_id in record.commit.applied_operations:
            applied.setdefault(operation_id, writer)
    return dispatched, applied


async def _until_requested(email: EmailClient, operation_id: str) -> None:
    deadline = time.monotonic() + 60
    while (await email.ledger()).requests.get(operation_id, 0) == 0:
        if time.monotonic() > deadline:
            raise SystemExit("email 4 never reached the email service")
        await asyncio.sleep(0.05)


def _container_state(name: str, docker_url: str) -> str:
    done = subprocess.run(
        ["docker", "-H", docker_url, "inspect", "-f", "{{.State.Status}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "gone"
