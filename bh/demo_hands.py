"""``bh demo --hands``: the five-emails task with ``send_email`` sandboxed on the Hands.

It brings up NATS and Docker with the dev stack, builds the ``send-email`` image once
(cached), registers it (granted only the email service's host:port; the service's token
stays with the Hands' egress proxy), and runs a Brain and a Hands as separate processes.
The email service is told to swallow its answer to email 4, then: the Brain is
SIGKILLed right after dispatching email 4, and the Hands while email 4's container
still waits for that answer. A fresh Hands and a fresh Brain finish the job: emails 1-3
are reused from the store, email 4 is verified by its operation id (its container could
not tell whether it was sent), email 5 is sent — each exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.table import Table

from bh.demo import BATCH, REQUEST, SESSION, Servers, console, servers, worker
from bh.system import dev_env, dev_up
from examples.emails import scenario
from examples.emails.client import EmailClient
from examples.emails.tasks import notice_operation_id
from hands.images import build_images, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient

BRAIN_CRASH = "relay:published:tools.dispatch.send_email#4"


@dataclass(frozen=True)
class Stack:
    nats_url: str
    docker_url: str
    namespace: str
    work: Path


async def run(store_url: str | None) -> None:
    console.rule("[bold]brainhands demo: the Brain lets go, the Hands run the tool once")
    stack = _dev_stack()
    work = Path(tempfile.mkdtemp(prefix="brainhands-demo-hands-"))
    stack = Stack(stack.nats_url, stack.docker_url, f"demo{uuid.uuid4().hex[:8]}", work)
    store_url = store_url or f"sqlite:///{work}/store.db"
    console.print(f"Session Store: [cyan]{store_url}[/]   NATS: {stack.nats_url}")
    built = await build_images(stack.docker_url, names=["send-email"], say=lambda _: None)
    image = built[tool_tag("send-email")]
    console.print(
        f"Tool image {image.tag} ({image.image_id[:19]}): {'cached' if image.skipped else 'built'}"
    )
    async with servers() as running:
        store = await open_store(store_url)
        try:
            await _run(store, store_url, running, stack)
        finally:
            await store.close()


async def _run(store: SessionStore, store_url: str, running: Servers, stack: Stack) -> None:
    destination = _destination(running.email_url)
    async with DockerSandbox(
        DockerSandboxConfig(owner="bh-demo", docker_url=stack.docker_url)
    ) as docker:
        tool = await register_image(
            store,
            docker,
            tool_tag("send-email"),
            allow=[destination],
            config={"EMAIL_SERVICE_URL": running.email_url},
            registered_by="bh demo",
        )
    console.print(
        f"Registered [bold]{tool.ref}[/] ({tool.replay.value}, query entry point: "
        f"{'yes' if tool.queryable else 'no'}); network: only {destination}, through the "
        "Hands' egress proxy, which holds the email service's token"
    )
    await SessionClient(store).submit(SESSION, REQUEST, {"text": scenario.REQUEST})
    console.print(f"\n[bold]1.[/] Submitted: “{scenario.REQUEST}”")
    fourth = notice_operation_id(SESSION, BATCH, 3)
    async with EmailClient(running.email_url, running.email_token) as email:
        await email.set_faults(1, hold_seconds=8, operation_id=fourth)
        console.print("   (the email service will accept email 4 but never answer it)")
        hands = _hands(store_url, running, stack, 1)
        console.print(f"[bold]2.[/] Hands #1 (pid {hands.pid}) and Brain #1 start…")
        code = await _brain(store_url, running, stack, BH_CRASH_AT=BRAIN_CRASH)
        if code != -signal.SIGKILL:
            raise SystemExit(f"Brain #1 was expected to be killed, it exited with {code}")
        console.print("   Brain #1 [red]killed with SIGKILL[/] right after dispatching email 4")
        await _until_requested(email, fourth)
        state = _container_state(f"bh-{fourth}", stack.docker_url)
        hands.send_signal(signal.SIGKILL)
        hands.wait()
        console.print(
            f"   Hands #1 [red]killed with SIGKILL[/] while container bh-{fourth[:14]}… "
            f"was {state} (email 4 accepted, its answer lost)"
        )
        console.print("[bold]3.[/] Hands #2 and Brain #2 start from the store…")
        started = time.monotonic()
        hands = _hands(store_url, running, stack, 2)
        try:
            if await _brain(store_url, running, stack) != 0:
                raise SystemExit("Brain #2 failed")
        finally:
            hands.send_signal(signal.SIGTERM)
            hands.wait(timeout=30)
        console.print(f"   finished in {time.monotonic() - started:.1f} s")
        await _show(store, email)
    console.print(f"\nOperations: [cyan]bh store inspect {store_url} {SESSION}[/]")


async def _show(store: SessionStore, email: EmailClient) -> None:
    state = (await store.session(SESSION)).state
    result: Any = state.tasks[BATCH].result
    receipts: list[dict[str, Any]] = result["receipts"]
    ledger = await email.ledger()
    sent = Counter(message.operation_id for message in ledger.messages)
    table = Table("#", "recipient", "recovered as", "container", "by", "sends", title="Per email")
    for number, receipt in enumerate(receipts, start=1):
        operation_id = str(receipt["operation_id"])
        outcome = await store.get_operation_result(operation_id)
        container = (outcome.container or "") if outcome else ""
        query = container.endswith("-query")
        table.add_row(
            str(number),
            str(receipt["to"]),
            f"[bold]{receipt['recovery']}[/]",
            container[:15] + "…" + (" (query)" if query else ""),
            (outcome.executor or "").split(":")[0] if outcome else "",
            str(sent[operation_id]),
        )
    console.print(table)
    console.print(
        "   reused = applied before the crash; verified = its container could not tell "
        "whether the email went out, so the Hands ran the tool's query container for its "
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


def _hands(store_url: str, running: Servers, stack: Stack, number: int) -> subprocess.Popen[bytes]:
    credentials = stack.work / "credentials.json"
    if not credentials.exists():
        headers = {"Authorization": f"Bearer {running.email_token}"}
        credentials.write_text(json.dumps({_destination(running.email_url): headers}))
        credentials.chmod(0o600)
    with (stack.work / f"hands-{number}.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "hands", "--sandbox", "docker"],
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "DOCKER_HOST": stack.docker_url,
                "BH_STORE_URL": store_url,
                "BH_NATS_URL": stack.nats_url,
                "BH_NAMESPACE": stack.namespace,
                "BH_HANDS_ID": f"hands#{number}:{uuid.uuid4().hex[:6]}",
                "BH_HANDS_OWNER": "bh-demo",
                "BH_HANDS_ACK_WAIT": "3",
                "BH_HANDS_CREDENTIALS": str(credentials),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def _brain(store_url: str, running: Servers, stack: Stack, **env: str) -> int:
    bus = {"BH_NATS_URL": stack.nats_url, "BH_NAMESPACE": stack.namespace}
    return await worker(store_url, running, "--sandboxed", "send_email", **bus, **env)


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


def _destination(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def _dev_stack() -> Stack:
    """NATS and Docker from ``bh dev up`` (started when not running)."""
    console.print("Bringing up the dev stack (bh dev up --require docker)…")
    dev_up()
    values = dev_env()
    return Stack(
        nats_url=values["BH_NATS_URL"],
        docker_url=values.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
        namespace="",
        work=Path(),
    )
