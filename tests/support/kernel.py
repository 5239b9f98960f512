"""A kernel on an embedded SQLite store, for tests of task behaviour."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from brain.context import PhaseContext
from brain.embedded import run_until_idle
from brain.model.client import ModelClient
from brain.outcome import Done
from brain.registry import Backoff, Registry, TaskKind
from brain.runner import DriveReport, SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher, ToolSpec
from contracts import Submission, Task, utcnow
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient

FAST = Backoff(initial=timedelta(milliseconds=10))


def kind(name: str, phases: dict[str, Any], **options: Any) -> TaskKind:
    """Version 1 of a task kind with a fast backoff, for tests."""
    return TaskKind(name=name, version=1, phases=phases, backoff=FAST, **options)


@dataclass
class Kernel:
    store: SessionStore
    registry: Registry
    tools: LocalDispatcher
    client: SessionClient

    def runner(
        self,
        runner_id: str | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        model: ModelClient | None = None,
        limits: Any = None,
    ) -> SessionRunner:
        """A runner of this kernel's kinds; ``model`` and ``limits`` (a stand-in for
        ``coordination.ratelimit.ModelLimits``) for agent tasks."""
        services = Services(
            store=self.store,
            tools=self.tools,
            crash=CrashPoints(),
            clock=clock,
            runner_id=runner_id or uuid.uuid4().hex[:8],
            model=model,
            limits=limits,
        )
        return SessionRunner(self.store, self.registry, services)

    async def run(self, session_id: str = "s1", **services: Any) -> DriveReport:
        return await run_until_idle(self.runner(**services), session_id)

    async def submit_task(
        self, kind: str, input: object = None, *, session_id: str = "s1", request_id: str = "r1"
    ) -> Submission:
        return await self.client.submit(
            session_id, request_id, {"task": {"kind": kind, "input": input}}
        )

    async def task(self, task_id: str, session_id: str = "s1") -> Task:
        return (await self.store.session(session_id)).state.tasks[task_id]

    async def submission(self, request_id: str = "r1", session_id: str = "s1") -> Submission:
        return (await self.store.session(session_id)).state.submissions[request_id]


@asynccontextmanager
async def kernel(
    tmp_path: Path, registry: Registry | None = None, **store_settings: Any
) -> AsyncIterator[Kernel]:
    store = await open_store(f"sqlite:///{tmp_path}/kernel.db", **store_settings)
    try:
        yield Kernel(store, registry or Registry(), LocalDispatcher(), SessionClient(store))
    finally:
        await store.close()


async def task_history(store: SessionStore, session_id: str, task_id: str) -> list[Task]:
    """Every revision of a task as the log recorded it, oldest first."""

    revisions = []
    async for record in store.history(session_id):
        revisions.extend(t for t in record.commit.tasks if t.id == task_id)
    return revisions


async def cancel_during_call(k: Kernel) -> None:
    """Run a ``mail`` task (registered by ``mail_kind``) whose send never returns, and
    cancel it while the call is in flight."""
    inside = asyncio.Event()

    async def slow_send(args: dict[str, Any], operation_id: str) -> Any:
        inside.set()
        await asyncio.sleep(3600)

    k.tools.register(ToolSpec(name="send"), slow_send)
    await k.submit_task("mail")
    drive = asyncio.create_task(k.run())
    await asyncio.wait_for(inside.wait(), 10)
    await k.client.cancel("s1", task_id="root.r1", reason="operator")
    await asyncio.wait_for(drive, 10)


def mail_kind() -> TaskKind:
    """A task that sends one email through the ``send`` tool."""

    async def start(ctx: PhaseContext) -> Done:
        await ctx.operation("send", {"to": "x@example.com"}, "mail")
        return Done(result="sent")

    return kind("mail", {"start": start})
