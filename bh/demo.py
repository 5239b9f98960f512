"""``bh demo --embedded``: a durable agent task, a killed worker, and the recovery — no
services (``bh demo`` without it runs the whole system: ``bh.demo_system``).

The demo starts the example email service and a scripted model server as local
processes, submits "send the approved notice to five customers and summarise", runs a
Brain worker that is SIGKILLed right after email 4 was accepted but before that was
saved, then starts a fresh worker that resumes from the store. It prints, per email,
how the second worker recovered it: *reused* (settled before the crash), *verified*
(asked the email service by operation id), or *executed* (sent for the first time).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from bh import terminal
from bh.fleet import Fleet
from contracts import BrainhandsError, TaskStatus
from examples.emails import scenario
from examples.emails.client import EmailClient
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient

CRASH_POINT = "call:after:send_email#4"
SESSION = "demo"
REQUEST = "notify-customers"
BATCH = f"root.{REQUEST}.r1.c0.run"

console = terminal.console()


@dataclass(frozen=True)
class Servers:
    email_url: str
    email_token: str
    model_url: str
    model_token: str
    #: where the demo's processes log (``bh.fleet.Fleet``)
    work: Path

    def worker_env(self, **extra: str) -> dict[str, str]:
        return scenario.worker_env(
            email_url=self.email_url,
            email_token=self.email_token,
            model_url=self.model_url,
            model_token=self.model_token,
            **extra,
        )


def demo(
    store: Annotated[
        str | None, typer.Option(help="Session Store URL (default: a new SQLite file)")
    ] = None,
    embedded: Annotated[
        bool,
        typer.Option(
            "--embedded",
            help="No services: one embedded Brain process at a time on an SQLite store, "
            "send_email in process; kill it mid-batch and recover.",
        ),
    ] = False,
    example: Annotated[
        str,
        typer.Option(
            help="five-emails, or coding: the coding assistant's workspace through a "
            "killed Brain and a killed Hands (the whole system)"
        ),
    ] = "five-emails",
) -> None:
    """The five-emails task on the whole system (scheduler, Session API, Brains, Hands
    in Docker): kill a Brain mid-tool and a Hands mid-send, recover, show who did what."""
    try:
        if example == "coding":
            from bh import demo_coding

            asyncio.run(demo_coding.run(store))
            return
        if example != "five-emails":
            raise typer.BadParameter(f"unknown example {example!r} (five-emails or coding)")
        if not embedded:
            from bh import demo_system

            asyncio.run(demo_system.run(store))
            return
        if store is None:
            store = f"sqlite:///{tempfile.mkdtemp(prefix='brainhands-demo-')}/store.db"
        asyncio.run(_demo(store))
    except BrainhandsError as error:
        console.print(f"[red]{error.code}[/]: {error.message}")
        raise typer.Exit(2) from None


async def _demo(store_url: str) -> None:
    console.rule("[bold]brainhands demo: a durable agent task survives a crash")
    console.print(f"Session Store: [cyan]{store_url}[/] (embedded; no services needed)")
    async with servers() as running:
        console.print(f"Email service: {running.email_url}   Scripted model: {running.model_url}")
        store = await open_store(store_url)
        try:
            await _run(store, store_url, running)
        finally:
            await store.close()


async def _run(store: SessionStore, store_url: str, running: Servers) -> None:
    await SessionClient(store).submit(SESSION, REQUEST, {"text": scenario.REQUEST})
    console.print(f"\n[bold]1.[/] Submitted: “{scenario.REQUEST}”")

    console.print("[bold]2.[/] Worker #1 runs the task…")
    code = await worker(store_url, running, BH_CRASH_AT=CRASH_POINT)
    if code != -signal.SIGKILL:
        raise SystemExit(f"worker #1 was expected to be killed, it exited with {code}")
    console.print(
        "   [red]killed with SIGKILL[/] right after the email service accepted email 4, "
        "before the worker could save that"
    )
    await _show_crash_state(store)

    console.print("[bold]3.[/] Worker #2 starts from the store and resumes…")
    started = time.monotonic()
    if await worker(store_url, running) != 0:
        raise SystemExit("worker #2 failed")
    console.print(f"   finished in {time.monotonic() - started:.1f} s")
    await _show_outcome(store, running)
    console.print(f"\nInspect the session: [cyan]bh store inspect {store_url} {SESSION}[/]")


async def worker(store_url: str, running: Servers, *options: str, **env: str) -> int:
    """A ``python -m brain run`` worker of the demo session, run to its end (through the
    one launcher, ``bh.fleet``); its exit status."""
    argv = [sys.executable, "-m", "brain", "run", "--store", store_url, "--session", SESSION]
    argv += ["--plugin", scenario.PLUGIN, *options]
    fleet = Fleet(running.work, running.worker_env(**env), {"worker": argv})
    code = await fleet.run("worker")
    if code not in (0, -signal.SIGKILL):
        console.print(fleet.tail("worker"))
    return code


async def _show_crash_state(store: SessionStore) -> None:
    state = (await store.session(SESSION)).state
    notices = [t for t in state.tasks.values() if t.parent_id == BATCH]
    settled = sum(1 for t in notices if t.is_terminal)
    running = [t for t in notices if t.status is TaskStatus.RUNNING]
    line = f"   in the store: {settled} notices settled"
    if running:
        line += f", notice {len(notices)} running (phase {running[0].phase!r}, outcome unknown)"
    console.print(line + f", {5 - len(notices)} not started")


async def _show_outcome(store: SessionStore, running: Servers) -> None:
    handle = await store.session(SESSION)
    state = handle.state
    result: Any = state.tasks[BATCH].result
    receipts: list[dict[str, Any]] = result["receipts"]
    async with EmailClient(running.email_url, running.email_token) as email:
        ledger = await email.ledger()
    sent = Counter(message.operation_id for message in ledger.messages)
    table = Table("#", "recipient", "recovered as", "operation id", "sends", title="Per email")
    for number, receipt in enumerate(receipts, start=1):
        operation_id = str(receipt["operation_id"])
        table.add_row(
            str(number),
            str(receipt["to"]),
            f"[bold]{receipt['recovery']}[/]",
            operation_id[:20] + "…",
            str(sent[operation_id]),
        )
    console.print(table)
    console.print(
        "   reused = settled before the crash, taken from the store; verified = outcome "
        "unknown, asked the email service by operation id; executed = sent now"
    )
    submission = state.submissions[REQUEST]
    answer = str(submission.answer)
    answer = answer if len(answer) <= 160 else answer[:160] + "…"
    console.print(f"[bold]Final answer[/] ({submission.status.value}): {answer}")
    once = all(sent[str(r["operation_id"])] == 1 for r in receipts)
    asked = all(ledger.requests.get(str(r["operation_id"])) == 1 for r in receipts)
    console.print(
        f"Each email sent exactly once: {'yes' if once else 'NO'}. "
        f"Each requested exactly once (no blind re-send): {'yes' if asked else 'NO'}. "
        f"Results applied: {len(state.applied_operations)} operations, once each."
    )


@asynccontextmanager
async def servers() -> AsyncIterator[Servers]:
    """The example's email service and scripted model server, each on a free port."""
    email_token, model_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    work = Path(tempfile.mkdtemp(prefix="brainhands-demo-"))
    model = ["-m", "brain.model.scripted", "--script", str(scenario.SCRIPT_PATH)]
    fleet = Fleet(
        work,
        {**os.environ, "PYTHONUNBUFFERED": "1"},
        {
            "email": [sys.executable, "-m", "examples.emails.service", "--port", "0"],
            "model": [sys.executable, *model, "--port", "0"],
        },
    )
    try:
        fleet.start("email", BH_EMAIL_SERVICE_TOKEN=email_token)
        fleet.start("model", BH_SCRIPTED_MODEL_TOKEN=model_token)
        email_url, model_url = await fleet.address("email"), await fleet.address("model")
        yield Servers(email_url, email_token, model_url, model_token, work)
    finally:
        await asyncio.to_thread(fleet.stop_all)
