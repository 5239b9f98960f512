"""Task kinds of the distributed benchmarks (a Brain plugin: ``bench.workload:plugin``).

* ``one-call``: one tool call, ``{"tool": NAME, "args": {...}}`` (sandboxed on the
  Hands when the Brain runs with ``--sandboxed NAME``), its result applied as it ends.
* ``chain``: 100 trivial phases, each committed before the next (``bench.kernel``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from bench.kernel import chain_kind
from brain.context import PhaseContext
from brain.outcome import Done, Effects, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher

CHAIN_PHASES = 100


async def _one_call(ctx: PhaseContext) -> PhaseOutcome:
    spec: dict[str, Any] = ctx.input or {}
    performed = await ctx.operation(str(spec["tool"]), spec.get("args", {}), "call")
    applied = Effects(applied_operations=(performed.operation_id,))
    return Done(result=performed.output, effects=applied)


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("one-call", 1, {"start": _one_call}))
    registry.add(chain_kind(CHAIN_PHASES))
