"""The workspace crash tests' task kind: ``coder`` makes ``CALLS`` ``rw`` calls of the
``edit`` tool in turn, each applied before the next is made (one writer at a time).
Loaded in process by the tests, and by ``python -m brain run --plugin
tests.support.workspace_coder:plugin`` when the Brain is a process of its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Next, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher

CALLS = 3
KIND = "coder"


def _phase(n: int) -> Callable[[PhaseContext], Awaitable[PhaseOutcome]]:
    async def call(ctx: PhaseContext) -> PhaseOutcome:
        performed = await ctx.operation("edit", {"n": n}, f"edit{n}")
        effects = Effects(applied_operations=(performed.operation_id,))
        if n == CALLS:
            return Done(result={"calls": n}, effects=effects)
        return Next(phase=f"e{n + 1}", effects=effects)

    return call


def coder() -> TaskKind:
    phases = {"start": _phase(1), **{f"e{n}": _phase(n) for n in range(2, CALLS + 1)}}
    return TaskKind(KIND, 1, phases)


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(coder())
