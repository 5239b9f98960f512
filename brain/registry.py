"""Task kinds this Brain can run: versioned phase handlers, and migrations between versions.

A task whose kind/version has no handler and no migration path is *blocked*: the
kernel leaves it untouched and reports why, until a compatible Brain runs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from contracts import InvalidInput, Task

if TYPE_CHECKING:
    from brain.context import PhaseContext
    from brain.outcome import PhaseOutcome

PhaseHandler = Callable[["PhaseContext"], Awaitable["PhaseOutcome"]]
MigrateFn = Callable[[Task], Task]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff between attempts of a phase: initial * factor ** (attempt - 1)."""

    initial: timedelta = timedelta(milliseconds=500)
    factor: float = 2.0
    limit: timedelta = timedelta(minutes=5)

    def delay(self, attempt: int) -> timedelta:
        seconds = self.initial.total_seconds() * self.factor ** max(0, attempt - 1)
        return min(timedelta(seconds=seconds), self.limit)


@dataclass(frozen=True)
class TaskKind:
    """One version of a task kind: its phases, and how often a phase may be tried.

    ``max_crashes`` is the restart limit: a phase that was started this many times
    without an outcome (its process died each time) fails the task. ``max_attempts``
    bounds retries after errors. ``interruptible`` names the phases a new message may
    abandon (policy ``interrupt``), each with the phase to enter instead; the call the
    phase makes through ``PhaseContext.interruptible`` is cancelled (a call that has
    answered is not), and the next phase finds why in the memo (``interrupted``).
    """

    name: str
    version: int
    phases: Mapping[str, PhaseHandler]
    max_crashes: int = 3
    max_attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    interruptible: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Migration:
    """Turns a task of ``name`` at ``from_version`` into one at ``to_version``."""

    name: str
    from_version: int
    to_version: int
    migrate: MigrateFn


@dataclass(frozen=True)
class Resolution:
    """How to run a task here: a handler (after migrations), or why it is blocked."""

    kind: TaskKind | None
    migrations: tuple[Migration, ...] = ()
    blocked: str | None = None


class Registry:
    def __init__(self) -> None:
        self._kinds: dict[tuple[str, int], TaskKind] = {}
        self._migrations: dict[tuple[str, int], Migration] = {}

    def add(self, kind: TaskKind) -> TaskKind:
        if (kind.name, kind.version) in self._kinds:
            raise InvalidInput(f"task kind {kind.key} is registered twice")
        self._kinds[(kind.name, kind.version)] = kind
        return kind

    def add_migration(self, migration: Migration) -> None:
        if migration.to_version <= migration.from_version:
            raise InvalidInput("a migration must move to a higher version")
        self._migrations[(migration.name, migration.from_version)] = migration

    def resolve(self, task: Task) -> Resolution:
        chain: list[Migration] = []
        version = task.version
        while (task.kind, version) not in self._kinds:
            step = self._migrations.get((task.kind, version))
            if step is None:
                return Resolution(kind=None, blocked=self._why_blocked(task))
            chain.append(step)
            version = step.to_version
        kind = self._kinds[(task.kind, version)]
        if not chain and task.phase not in kind.phases and not task.is_terminal:
            return Resolution(
                kind=None,
                blocked=f"{kind.key} has no phase {task.phase!r} "
                f"(it has {', '.join(sorted(kind.phases))})",
            )
        return Resolution(kind=kind, migrations=tuple(chain))

    def compatibility(self) -> tuple[str, ...]:
        """The kinds and versions this Brain can run, e.g. ``("agent@1", "tool-call@1")``:
        its own, and every older version a chain of migrations leads to one of them."""
        runs = {kind.key for kind in self._kinds.values()}
        for name, version in self._migrations:
            seen, at = set(), version
            while (name, at) in self._migrations and at not in seen:
                seen.add(at)
                at = self._migrations[(name, at)].to_version
            if (name, at) in self._kinds:
                runs.add(f"{name}@{version}")
        return tuple(sorted(runs))

    def _why_blocked(self, task: Task) -> str:
        here = [kind.key for kind in self._kinds.values() if kind.name == task.kind]
        runs = (
            f"this Brain runs {', '.join(sorted(here))}" if here else "this Brain runs no version"
        )
        return f"no handler for {task.kind}@{task.version} and no migration from it; {runs}"
