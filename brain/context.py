"""What a phase handler sees: its task, a read-only view of the session, and services."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from brain.crashpoints import CrashPoints
from brain.operations import Resolution, resolve
from brain.tools import ToolDispatcher
from contracts import Document, Entry, Task
from session_store import SessionHandle, SessionStore

if TYPE_CHECKING:
    from brain.model.client import ModelClient


@dataclass(frozen=True)
class Services:
    """Everything phases may use besides the session itself."""

    store: SessionStore
    tools: ToolDispatcher
    crash: CrashPoints
    clock: Callable[[], datetime]
    runner_id: str
    model: ModelClient | None = None


class PhaseContext:
    """Handed to a phase handler. Reading is free; all writing goes through the outcome."""

    def __init__(self, task: Task, handle: SessionHandle, services: Services) -> None:
        self.task = task
        self._handle = handle
        self.services = services

    @property
    def session_id(self) -> str:
        return self._handle.session_id

    @property
    def attempt(self) -> int:
        """Which start of this phase this is: 1 first time, more after crashes or retries."""
        return self.task.attempts

    @property
    def memo(self) -> dict[str, JsonValue]:
        return self.task.memo

    def memo_int(self, key: str, default: int = 0) -> int:
        value = self.task.memo.get(key, default)
        return value if isinstance(value, int) else default

    @property
    def input(self) -> Any:
        return self.task.input

    def now(self) -> datetime:
        return self.services.clock()

    def document(self, name: str) -> Document | None:
        return self._handle.state.documents.get(name)

    def get_task(self, task_id: str) -> Task | None:
        return self._handle.state.tasks.get(task_id)

    def children(self) -> list[Task]:
        """Tasks this task created, in creation order."""
        return [t for t in self._handle.state.tasks.values() if t.parent_id == self.task.id]

    async def conversation(self, conversation_id: str) -> list[Entry]:
        return [e for e in await self._handle.entries() if e.conversation_id == conversation_id]

    def checkpoint(self, name: str) -> None:
        """Mark a moment where a crash is worth testing (see ``brain.crashpoints``)."""
        self.services.crash.reached(name)

    async def operation(self, tool: str, args: dict[str, Any], operation_id: str) -> Resolution:
        """Run an external action once, recovering safely if an earlier attempt died."""
        return await resolve(self, tool, args, operation_id)
