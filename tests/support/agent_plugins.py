"""Tools for agent tests, loaded as a worker plugin."""

from __future__ import annotations

import asyncio
import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from brain.registry import Registry
from brain.tools import LocalDispatcher, ToolSpec
from contracts import OutcomeUnknown, ReplayPolicy, SandboxTimeout

_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


async def _echo(args: dict[str, Any], operation_id: str) -> JsonValue:
    return {"echo": args["text"], "operation_id": operation_id}


async def _big(args: dict[str, Any], operation_id: str) -> JsonValue:
    return {"report": "x" * 100_000}


def _count(operation_id: str) -> int:
    """How often the flaky tool ran, kept in a file so it survives restarts."""
    path = Path(os.environ["BH_TEST_TOOL_LOG"])
    with path.open("a") as log:
        log.write(operation_id + "\n")
    return len(path.read_text().splitlines())


async def _lost(args: dict[str, Any], operation_id: str) -> JsonValue:
    _count(operation_id)
    raise OutcomeUnknown("the reply was lost", operation_id=operation_id)


async def _sandbox_timeout(args: dict[str, Any], operation_id: str) -> JsonValue:
    raise SandboxTimeout("the sandbox stopped the tool at its 30 s timeout")


async def _wait(args: dict[str, Any], operation_id: str) -> JsonValue:
    await asyncio.sleep(3600)
    return None


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    tools.register(ToolSpec(name="echo", parameters=_TEXT, replay=ReplayPolicy.SAFE), _echo)
    tools.register(ToolSpec(name="big", parameters={"type": "object"}), _big)
    tools.register(ToolSpec(name="charge_card", parameters=_TEXT), _lost)
    tools.register(ToolSpec(name="stuck_sandbox", parameters={"type": "object"}), _sandbox_timeout)
    tools.register(ToolSpec(name="wait", parameters={"type": "object"}), _wait)
