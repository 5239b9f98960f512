"""Stopping tasks for sure. On Python 3.11, ``asyncio.wait_for`` returns its inner
result and drops a cancellation that arrives in the step its inner future completes
(CPython gh-86296, fixed in 3.12). redis-py's async client wraps every command's send in
it (its default 5 s socket timeout) and nats-py its requests, so a loop cancelled during
one call may run on: a scheduler, Brain or Hands shutdown that cancels once and waits
then waits forever. ``cancel_and_wait`` cancels again until the task has ended."""

from __future__ import annotations

import asyncio
import sys

import pytest

from runtime.cancellation import cancel_and_wait


async def _loop_of_timed_calls() -> None:
    while True:
        await asyncio.wait_for(asyncio.sleep(0), timeout=5)  # a call, as redis-py makes it
        await asyncio.sleep(0.001)  # and the rest of the loop


async def _started(steps: int) -> asyncio.Task[None]:
    task = asyncio.create_task(_loop_of_timed_calls())
    for _ in range(steps):
        await asyncio.sleep(0)
    return task


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps cancellations")
async def test_one_cancel_can_be_dropped_by_wait_for() -> None:
    """The hazard itself: some step of a loop of timed calls drops the cancellation."""
    dropped = 0
    for steps in range(12):
        task = await _started(steps)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.1)
        if not done:
            dropped += 1
            await cancel_and_wait(task)
            break
    assert dropped > 0


async def test_a_task_is_stopped_whatever_step_it_is_in() -> None:
    for steps in range(6):
        task = await _started(steps)
        await asyncio.wait_for(cancel_and_wait(task), timeout=5)
        assert task.done()


async def test_errors_of_the_ended_tasks_are_returned_not_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    errors = await cancel_and_wait(task, asyncio.create_task(asyncio.sleep(60)))
    assert [str(error) for error in errors] == ["boom"]


async def test_a_task_that_will_not_stop_is_given_up_after_the_grace() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, within=0.3), timeout=5)
    assert not task.done()  # given up on, not waited for forever
    release.set()
    await cancel_and_wait(task)
