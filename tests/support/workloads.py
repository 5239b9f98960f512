"""Agent-shaped work for tests and benchmarks of growth: every task performs one tool
operation with an output of a given size and records it as a tool-result entry."""

from __future__ import annotations

from typing import Any

from brain.context import PhaseContext
from brain.outcome import Done, Effects
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher, ToolSpec
from contracts import Entry, EntryKind, ReplayPolicy

REPORT = "report"


def report_kind() -> TaskKind:
    """``report`` tasks: run the ``report`` tool once, keep its output in an entry; the
    outcome commit carries the entry, the applied mark and the terminal state."""

    async def answer(ctx: PhaseContext) -> Done:
        performed = await ctx.operation(REPORT, {"task": ctx.task.id}, REPORT)
        entry = Entry(
            id=f"{ctx.task.id}.result",
            kind=EntryKind.TOOL_RESULT,
            task_id=ctx.task.id,
            operation_id=performed.operation_id,
            content={"output": performed.output},
        )
        return Done(
            result={"entry": entry.id},
            effects=Effects(entries=(entry,), applied_operations=(performed.operation_id,)),
        )

    return TaskKind(REPORT, 1, {"start": answer})


def install_report(registry: Registry, tools: LocalDispatcher, output_bytes: int) -> None:
    async def report(args: dict[str, Any], operation_id: str) -> Any:
        return {"report": "x" * output_bytes}

    registry.add(report_kind())
    tools.register(ToolSpec(name=REPORT, replay=ReplayPolicy.SAFE), report)
