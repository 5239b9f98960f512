"""Task kinds for tests of Brain worker processes, loaded as a plugin."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher


async def _slow(ctx: PhaseContext) -> PhaseOutcome:
    """Sleeps ``input`` seconds inside the phase, then answers who ran it."""
    await asyncio.sleep(float(ctx.input or 0))
    return Done(result={"by": ctx.services.runner_id})


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("slow", 1, {"start": _slow}))
