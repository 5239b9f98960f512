"""A task kind for fork tests, loaded as a worker plugin: ``twice`` sends m1 (its result
applied), then in a later phase asks for m1 again (reused) and sends m2. The ``send``
tool appends each operation id it runs to the file ``$BH_TEST_TOOL_LOG``."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Next
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher, ToolSpec
from contracts import ReplayPolicy


def _record(line: str) -> None:
    with Path(os.environ["BH_TEST_TOOL_LOG"]).open("a") as log:
        log.write(line + "\n")


async def _send(args: dict[str, Any], operation_id: str) -> JsonValue:
    _record(f"{args['to']} {operation_id}")
    return {"to": args["to"]}


async def _first(ctx: PhaseContext) -> Next:
    sent = await ctx.operation("send", {"to": "m1"}, "m1")
    return Next(phase="second", effects=Effects(applied_operations=(sent.operation_id,)))


async def _second(ctx: PhaseContext) -> Done:
    again = await ctx.operation("send", {"to": "m1"}, "m1")
    sent = await ctx.operation("send", {"to": "m2"}, "m2")
    return Done(
        result={"m1": again.operation_id, "m2": sent.operation_id},
        effects=Effects(applied_operations=(sent.operation_id,)),
    )


def twice_kind(**options: Any) -> TaskKind:
    return TaskKind(name="twice", version=1, phases={"start": _first, "second": _second}, **options)


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    tools.register(ToolSpec(name="send", replay=ReplayPolicy.SAFE), _send)
    registry.add(twice_kind())
