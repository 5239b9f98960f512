"""``greet``: a task kind of one's own, with an in-process tool and a sandboxed one.

``{"name": "Ada"}`` → ``{"greeting": "HELLO, ADA!", "letters": 3, "operations": {…}}``:
the in-process tool ``shout`` makes the greeting in the Brain's process, then the
sandboxed tool ``letter_count`` counts the name's letters in a container on a Hands
(its image: ``tool/``). The Brain commits that call as an intent and lets go of the
session; when the Hands' result is in, the phase runs again from the top: both calls
keep their operation ids, so each reads its stored result instead of running again.

Run it (docs/deploy-own-agent.md deploys it into the compose services)::

    pip install examples/own-agent
    docker build -t greeter/letter-count:1 examples/own-agent/tool
    bh tools register greeter/letter-count:1
    python -m brain worker --plugin greeter.tasks:plugin --sandboxed letter_count
    bh submit s1 '{"task": {"kind": "greet", "input": {"name": "Ada"}}}' --json-input
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from pydantic import JsonValue

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Fail, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher, ToolSpec
from contracts import ErrorInfo, ReplayPolicy

KIND = "greet"
SHOUT = "shout"
LETTER_COUNT = "letter_count"

_NAME = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1}},
    "required": ["name"],
    "additionalProperties": False,
}
SHOUT_SPEC = ToolSpec(
    name=SHOUT,
    description="Greet `name`, loudly.",
    parameters=_NAME,
    # The same name gives the same greeting: after a crash it may simply run again.
    replay=ReplayPolicy.SAFE,
)


async def shout(args: dict[str, Any], operation_id: str) -> JsonValue:
    """The in-process tool: runs in the Brain, as a coroutine."""
    return {"greeting": f"HELLO, {args['name'].upper()}!"}


async def _greet(ctx: PhaseContext) -> PhaseOutcome:
    name = ctx.input.get("name") if isinstance(ctx.input, dict) else None
    if not isinstance(name, str) or not name:
        return Fail(error=ErrorInfo(code="invalid_input", message='input must be {"name": "..."}'))
    shouted = await ctx.operation(SHOUT, {"name": name}, "shout")
    counted = await ctx.operation(LETTER_COUNT, {"name": name}, "count")
    greeting = shouted.output if isinstance(shouted.output, dict) else {}
    letters = counted.output if isinstance(counted.output, dict) else {}
    result = {
        "greeting": greeting.get("greeting"),
        "letters": letters.get("letters"),
        "operations": {SHOUT: shouted.operation_id, LETTER_COUNT: counted.operation_id},
    }
    applied = (shouted.operation_id, counted.operation_id)
    return Done(result=result, effects=Effects(applied_operations=applied))


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    """``greet`` and ``shout``; ``letter_count`` comes from the catalog (``--sandboxed``)."""
    tools.register(SHOUT_SPEC, shout)
    registry.add(TaskKind(KIND, 1, {"start": _greet}))
