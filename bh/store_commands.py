"""``bh store``: create, inspect and list what a Session Store holds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from contracts import BrainhandsError
from session_store import SessionStore, open_store

app = typer.Typer(help="Create and inspect Session Stores.", no_args_is_help=True)
console = Console()

StoreUrl = Annotated[
    str,
    typer.Argument(
        help="sqlite:///path.db | s3://bucket/prefix?endpoint_url=… | dynamodb://table?…",
        envvar="BH_STORE_URL",
    ),
]


@app.command()
def init(url: StoreUrl) -> None:
    """Create the file, bucket or table behind URL (idempotent)."""

    async def run() -> None:
        store = await open_store(url, create=True)
        await store.close()

    _run(run())
    console.print(f"store ready: {url.split('?')[0]}")


@app.command()
def active(url: StoreUrl) -> None:
    """List sessions that may have work left (the reconciler's view)."""

    async def run(store: SessionStore) -> None:
        async for session_id in store.active_sessions():
            console.print(session_id)

    _run(_read_only(url, run))


@app.command()
def inspect(url: StoreUrl, session_id: str) -> None:
    """Show a session's head, tasks, submissions and pending outbox (read-only)."""

    async def run(store: SessionStore) -> None:
        handle = await store.session(session_id)
        state = handle.state
        console.print(
            f"session [bold]{session_id}[/]: seq {state.seq}, fence {state.fence}, "
            f"{state.entry_count} entries, {'active' if state.is_active else 'finished'}"
        )
        tasks = Table(title="tasks")
        for column in ("task", "kind", "status", "phase", "attempts", "outcome", "reason"):
            tasks.add_column(column, overflow="fold")
        for task in state.tasks.values():
            outcome = task.outcome.value if task.outcome else ""
            tasks.add_row(
                task.id,
                f"{task.kind}@{task.version}",
                task.status.value,
                task.phase,
                str(task.attempts),
                outcome,
                task.reason or (task.error.message if task.error else ""),
            )
        console.print(tasks)
        subs = Table("request", "status", "task", title="submissions")
        for sub in state.submissions.values():
            subs.add_row(sub.request_id, sub.status.value, sub.task_id or "")
        console.print(subs)
        if state.outbox:
            console.print(f"pending outbox: {', '.join(sorted(state.outbox))}")

    _run(_read_only(url, run))


async def _read_only(url: str, body: Callable[[SessionStore], Awaitable[None]]) -> None:
    store = await open_store(url, read_only=True)
    try:
        await body(store)
    finally:
        await store.close()


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        asyncio.run(coroutine)
    except BrainhandsError as error:
        console.print(f"[red]{error.code}[/]: {error.message}")
        raise typer.Exit(2) from None
