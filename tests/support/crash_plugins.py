"""Task kinds for crash tests, loaded by ``python -m brain run --plugin …``."""

from __future__ import annotations

import os
import signal
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome, Retry, Sleep, Wait
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher
from contracts.question import Question, QuestionKind


def _note(line: str) -> None:
    with Path(os.environ["BH_TEST_POISON_LOG"]).open("a") as log:
        log.write(line + "\n")


async def _poison(ctx: PhaseContext) -> PhaseOutcome:
    _note(f"attempt {ctx.attempt}")  # a tiny local write; the process dies right after
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


async def _stumble(ctx: PhaseContext) -> PhaseOutcome:
    # Two transient errors (say, a model's 429s), then the process dies once.
    _note(f"attempt {ctx.attempt}")
    if ctx.attempt <= 2:
        return Retry(reason="429 Too Many Requests", delay=timedelta(0))
    if ctx.attempt == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return Done(result=f"done at attempt {ctx.attempt}")


async def _nap(ctx: PhaseContext) -> PhaseOutcome:
    return Sleep(until=ctx.now() + timedelta(seconds=1.5), next_phase="wake")


async def _wake(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result=ctx.now().isoformat())


async def _later(ctx: PhaseContext) -> PhaseOutcome:
    return Done(result=f"ran {ctx.task.kind}@{ctx.task.version}")


async def poison(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("poison", 1, {"start": _poison}, max_crashes=3))


async def stumble(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("stumble", 1, {"start": _stumble}, max_crashes=3))


async def nap(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("nap", 1, {"start": _nap, "wake": _wake}))


async def later(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("later", 2, {"start": _later}))


async def _ask(ctx: PhaseContext) -> PhaseOutcome:
    _note("asked")
    question = Question(
        id="q1", prompt="Which colour?", kind=QuestionKind.CHOICE, choices=("red", "blue")
    )
    return Wait(question=question, next_phase="told")


async def _told(ctx: PhaseContext) -> PhaseOutcome:
    value = ctx.answer("q1").value
    ctx.crash_point("ask:told")  # a kill here re-runs this phase: it notes once, after
    _note(f"told {value}")
    return Done(result={"value": value})


async def ask(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    registry.add(TaskKind("ask", 1, {"start": _ask, "told": _told}))
