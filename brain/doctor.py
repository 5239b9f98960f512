"""The ``doctor`` task kind, built into every Brain: the probe session of ``bh doctor``.

Submitted as ``{"task": {"kind": "doctor", "input": {"tool": NAME, "args": {...}}}}``,
it answers with the Brain that drove it and, when ``tool`` is given, runs that tool
once (sandboxed on the Hands when the Brain runs it ``--sandboxed``) and answers with
the operation's id and output: the whole path — Session API, wake, Brain, dispatch,
Hands, result, scheduler, Brain again — in one session.
"""

from __future__ import annotations

from typing import Any

from brain.context import PhaseContext
from brain.outcome import Done, Effects, PhaseOutcome
from brain.registry import TaskKind

DOCTOR = "doctor"


async def _probe(ctx: PhaseContext) -> PhaseOutcome:
    spec: dict[str, Any] = ctx.input if isinstance(ctx.input, dict) else {}
    answer: dict[str, Any] = {"brain": ctx.services.runner_id}
    tool = spec.get("tool")
    if not tool:
        return Done(result=answer)
    args = spec.get("args")
    performed = await ctx.operation(str(tool), args if isinstance(args, dict) else {}, "probe")
    answer |= {"operation": performed.operation_id, "output": performed.output}
    return Done(result=answer, effects=Effects(applied_operations=(performed.operation_id,)))


def doctor_kind() -> TaskKind:
    return TaskKind(DOCTOR, 1, {"start": _probe})
