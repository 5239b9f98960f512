"""Task kinds of the chaos workload (a Brain plugin: ``examples.chaos.workload:plugin``).

* ``steps``: ``n`` sandboxed calls of ``count`` one after another, a durable sleep in
  between, one deliberately failing call when ``fail`` is set (the task then fails
  with the reason — an expected outcome, not a violation).
* ``fanout``: ``width`` ``steps`` subtasks at once, then a summary.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Next, PhaseOutcome, Sleep, TaskSpec, Wait
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher

TOOL = "count"


async def _step(ctx: PhaseContext) -> PhaseOutcome:
    spec: dict[str, Any] = ctx.input or {}
    done = ctx.memo_int("done")
    if done >= int(spec.get("n", 3)):
        return Done(result={"steps": done})
    args = {
        "seconds": float(spec.get("seconds", 0.2)),
        "fail": bool(spec.get("fail")) and done == 1,
    }
    performed = await ctx.operation(TOOL, args, f"step-{done}")
    effects = Effects(applied_operations=(performed.operation_id,), memo={"done": done + 1})
    if spec.get("sleep"):
        until = ctx.now() + timedelta(seconds=float(spec["sleep"]))
        return Sleep(until=until, next_phase="start", effects=effects)
    return Next(phase="start", effects=effects)


async def _fanout(ctx: PhaseContext) -> PhaseOutcome:
    spec: dict[str, Any] = ctx.input or {}
    children = tuple(
        TaskSpec(id=f"{ctx.task.id}.c{n}", kind="steps", input=spec.get("child", {"n": 2}))
        for n in range(int(spec.get("width", 3)))
    )
    return Wait(
        tasks=tuple(child.id for child in children),
        next_phase="summarise",
        effects=Effects(spawn=children),
    )


async def _summarise(ctx: PhaseContext) -> PhaseOutcome:
    outcomes = [child.outcome.value if child.outcome else None for child in ctx.children()]
    return Done(result={"children": outcomes})


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("steps", 1, {"start": _step}))
    registry.add(TaskKind("fanout", 1, {"start": _fanout, "summarise": _summarise}))
