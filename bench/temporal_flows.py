"""The Temporal side of ``bench.temporal``: workflows and activities, in a module of their
own (Temporal's workflow sandbox re-imports the module that defines a workflow, so it
imports nothing but the SDK)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

TIMEOUT = timedelta(seconds=60)


@activity.defn
async def run_container(argv: list[str]) -> str:
    """Run one container (``docker run --rm …``) to its end; its standard output."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"container exited {process.returncode}: {err.decode()[-500:]}")
    return out.decode()


@activity.defn
async def trivial(index: int) -> int:
    return index


@workflow.defn
class OneCall:
    """One activity that runs the tool's container."""

    @workflow.run
    async def run(self, argv: list[str]) -> str:
        return await workflow.execute_activity(run_container, argv, start_to_close_timeout=TIMEOUT)


@workflow.defn
class Steps:
    """``steps`` trivial activities, one after another."""

    @workflow.run
    async def run(self, steps: int) -> int:
        total = 0
        for index in range(steps):
            total += await workflow.execute_activity(trivial, index, start_to_close_timeout=TIMEOUT)
        return total


@workflow.defn
class LocalSteps:
    """``steps`` trivial local activities (run by the workflow's worker, recorded in the
    workflow's history in batches): Temporal's cheaper kind of step."""

    @workflow.run
    async def run(self, steps: int) -> int:
        total = 0
        for index in range(steps):
            total += await workflow.execute_local_activity(
                trivial, index, start_to_close_timeout=TIMEOUT
            )
        return total
