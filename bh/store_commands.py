"""``bh store``: create, inspect and list what a Session Store holds; collect the
workspace blobs nothing retains."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any

import typer
from rich.table import Table

from bh import terminal
from contracts import BrainhandsError, Operation
from session_store import SessionHandle, SessionState, SessionStore, open_store
from session_store.collection import Collected

app = typer.Typer(help="Create and inspect Session Stores.", no_args_is_help=True)
console = terminal.console()

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
    """Show a session's head, open tasks, submissions, operations and anything a load had
    to skip (read-only)."""

    async def run(store: SessionStore) -> None:
        handle = await store.session(session_id)
        _head(handle)
        console.print(_tasks(handle.state))
        subs = Table("request", "status", "task", title="open and recent submissions")
        for sub in handle.state.submissions.values():
            subs.add_row(sub.request_id, sub.status.value, sub.task_id or "")
        console.print(subs)
        console.print(_operations(await store.list_operations(session_id)))
        if handle.state.outbox:
            console.print(f"pending outbox: {', '.join(sorted(handle.state.outbox))}")

    _run(_read_only(url, run))


@app.command()
def collect(
    url: StoreUrl,
    sessions: Annotated[
        list[str] | None,
        typer.Option(
            "--session",
            help="Collect what this session's retention lets go (repeatable); "
            "default: the whole store's unretained blobs.",
        ),
    ] = None,
    grace_seconds: Annotated[
        float,
        typer.Option(
            envvar="BH_WORKSPACE_GRACE_SECONDS",
            min=0,
            help="Keep a blob a writer touched this recently (0 only with no writer running).",
        ),
    ] = 3600,
) -> None:
    """Delete the workspace versions and blobs nothing retains, safely beside running
    writers (what the scheduler does every hour; docs/workspaces.md, "Retention")."""

    async def run() -> None:
        store = await open_store(url, workspace_grace_seconds=grace_seconds)
        try:
            for session_id in sessions or ():
                _collected(session_id, await store.workspaces.collect(session_id))
            if not sessions:
                _collected("the store", await store.workspaces.collect_orphans())
        finally:
            await store.close()

    _run(run())


def _collected(what: str, done: Collected) -> None:
    console.print(
        f"{what}: {done.versions} version(s) and {done.blobs} blob(s) deleted; kept "
        f"{done.kept_young} young and {done.kept_touched} touched meanwhile; "
        f"{done.gone} already gone",
        highlight=False,
    )


def _head(handle: SessionHandle) -> None:
    state = handle.state
    console.print(
        f"session [bold]{state.session_id}[/]: seq {state.seq}, fence {state.fence} "
        f"(holder {state.holder or 'unnamed'}), {state.entry_count} entries, "
        f"{'active' if state.is_active else 'finished'}"
    )
    console.print(
        f"archived: {state.entries_archived} entries, {state.archived_tasks} tasks, "
        f"{state.archived_submissions} submissions, {state.archived_applied} applied marks"
    )
    for problem in handle.problems:
        console.print(f"[yellow]skipped while loading[/]: {problem}")


def _tasks(state: SessionState) -> Table:
    tasks = Table(title="open and recent tasks")
    for column in ("task", "kind", "status", "phase", "attempts", "crashes", "outcome", "reason"):
        tasks.add_column(column, overflow="fold")
    for task in state.tasks.values():
        status = f"{task.status.value} (parked)" if task.parked else task.status.value
        tasks.add_row(
            task.id,
            f"{task.kind}@{task.version}",
            status,
            task.phase,
            str(task.attempts),
            str(task.crashes),
            task.outcome.value if task.outcome else "",
            task.reason or (task.error.message if task.error else ""),
        )
    return tasks


def _operations(operations: list[Operation]) -> Table:
    table = Table(title="operations")
    for column in ("operation", "task", "tool", "status", "attempts", "executor", "reason"):
        table.add_column(column, overflow="fold")
    for operation in operations:
        decided = f" — decided by {operation.decided_by}: {operation.decision}"
        table.add_row(
            operation.operation_id,
            operation.task_id or "",
            operation.tool,
            operation.status.value,
            str(operation.attempts),
            operation.executor or "",
            (operation.reason or "") + (decided if operation.decided_by else ""),
        )
    return table


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
