"""``fetch``: one GET of ``input.url`` through the sandboxed ``http_get`` tool.

The Brain commits the call as an intent and lets go of the session; a Hands runs the
tool in its container (egress only to what the operator allowed at registration) and
writes the result; the scheduler wakes the session and this phase runs again, now
reading the result (the operation id is the same: the GET is not repeated).

    python -m brain worker --plugin examples.fetch.tasks:plugin --sandboxed http_get
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Fail, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher
from contracts import ErrorInfo

KIND = "fetch"
TOOL = "http_get"


async def _get(ctx: PhaseContext) -> PhaseOutcome:
    url = ctx.input.get("url") if isinstance(ctx.input, dict) else None
    if not isinstance(url, str):
        return Fail(error=ErrorInfo(code="invalid_input", message='input must be {"url": "..."}'))
    performed = await ctx.operation(TOOL, {"url": url}, "get")
    answer = performed.output if isinstance(performed.output, dict) else {}
    result = {
        "url": url,
        "status": answer.get("status"),
        "body": answer.get("body"),
        "operation_id": performed.operation_id,
    }
    return Done(result=result, effects=Effects(applied_operations=(performed.operation_id,)))


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    """The ``fetch`` kind; ``http_get`` itself comes from the catalog (``--sandboxed``)."""
    registry.add(TaskKind(KIND, 1, {"start": _get}))
