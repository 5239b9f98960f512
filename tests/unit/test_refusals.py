"""An outcome the store refuses fails its own task with the reason; it never crashes the
drive or disturbs the task's siblings (issue 6, defect 4)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Next, TaskSpec, Wait
from brain.registry import Registry
from contracts import DocumentPut, JoinPolicy, Outcome, SubmissionStatus
from tests.support.kernel import kernel, kind


def parent_of(*children: str) -> dict[str, object]:
    async def start(ctx: PhaseContext) -> Wait:
        spawn = tuple(TaskSpec(id=f"{ctx.task.id}.{name}", kind=name) for name in children)
        return Wait(
            tasks=tuple(s.id for s in spawn),
            join=JoinPolicy.ALL_SETTLED,
            next_phase="collect",
            effects=Effects(spawn=spawn),
        )

    async def collect(ctx: PhaseContext) -> Done:
        return Done(result={t.kind: t.outcome for t in ctx.children()})

    return {"start": start, "collect": collect}


async def test_applying_an_operation_twice_fails_only_the_second_task(tmp_path: Path) -> None:
    first_done = asyncio.Event()

    async def apply_first(ctx: PhaseContext) -> Done:
        first_done.set()
        return Done(result="first", effects=Effects(applied_operations=("op-1",)))

    async def apply_again(ctx: PhaseContext) -> Done:
        await first_done.wait()
        await asyncio.sleep(0.05)  # let the first outcome land
        return Done(result="again", effects=Effects(applied_operations=("op-1",)))

    async def bystander(ctx: PhaseContext) -> Done:
        await asyncio.sleep(0.2)  # still running when the refusal happens
        return Done(result="unharmed")

    registry = Registry()
    registry.add(kind("first", {"start": apply_first}))
    registry.add(kind("again", {"start": apply_again}))
    registry.add(kind("bystander", {"start": bystander}))
    registry.add(kind("parent", parent_of("first", "again", "bystander")))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("parent")
        await asyncio.wait_for(k.run(), 10)
        again = await k.task("root.r1.again")
        assert again.outcome is Outcome.FAILED and again.error is not None
        assert again.error.code == "already_applied" and "op-1" in again.error.message
        assert (await k.task("root.r1.bystander")).result == "unharmed"
        assert (await k.task("root.r1.bystander")).attempts == 1, "never restarted"
        assert (await k.submission()).answer == {
            "first": "succeeded",
            "again": "failed",
            "bystander": "succeeded",
        }


async def test_a_stale_document_version_fails_the_task_with_the_reason(tmp_path: Path) -> None:
    async def plan(ctx: PhaseContext) -> Next:
        put = DocumentPut(name="plan", body={"v": 1}, expected_version=0)
        return Next(phase="replan", effects=Effects(documents=(put,)))

    async def replan(ctx: PhaseContext) -> Done:
        put = DocumentPut(name="plan", body={"v": 2}, expected_version=0)  # stale guard
        return Done(result="replanned", effects=Effects(documents=(put,)))

    registry = Registry()
    registry.add(kind("planner", {"start": plan, "replan": replan}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("planner")
        report = await asyncio.wait_for(k.run(), 10)
        task = await k.task("root.r1")
        assert not report.active and task.outcome is Outcome.FAILED and task.error is not None
        assert task.error.code == "version_mismatch" and "plan" in task.error.message
        assert (await k.submission()).status is SubmissionStatus.FAILED
