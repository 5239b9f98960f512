"""Taking over a session: a new holder never repeats a call that may still be in flight,
a fence is claimed by one holder only, and a holder that keeps its session writes no
new claims (issue 6, defects 1 and 8)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from brain.context import PhaseContext
from brain.embedded import run_until_idle
from brain.outcome import Done, Sleep
from brain.registry import Registry
from brain.tools import QueryAnswer, ToolSpec
from contracts import CommitRecord, Outcome, TaskStatus, utcnow
from session_store import SessionStore
from tests.support.kernel import kernel, kind


async def claims(store: SessionStore, session_id: str = "s1") -> list[CommitRecord]:
    return [record async for record in store.history(session_id) if record.claim]


async def test_takeover_waits_for_an_in_flight_call_instead_of_running_it_again(
    tmp_path: Path,
) -> None:
    # Runner A is inside an unsafe, queryable call; the provider does not know the
    # operation yet. Runner B takes the session over with a newer fence. B must not
    # query-then-send: A's attempt may still land until its deadline.
    calls: list[str] = []
    a_inside, release_a = asyncio.Event(), asyncio.Event()

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        calls.append(operation_id)
        if len(calls) == 1:
            a_inside.set()
            await release_a.wait()
        return {"sent_to": args["to"]}

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        return QueryAnswer(found=False)  # A's request has not reached the provider yet

    async def start(ctx: PhaseContext) -> Done:
        resolution = await ctx.operation("send", {"to": "a@example.com"}, "mail")
        return Done(result=resolution.output)

    registry = Registry()
    registry.add(kind("mail", {"start": start}))
    async with kernel(tmp_path, registry) as k:
        k.tools.register(ToolSpec(name="send", timeout=timedelta(seconds=1)), send, query)
        await k.submit_task("mail")
        stale = asyncio.create_task(k.runner("A").drive("s1", fence=5))
        await asyncio.wait_for(a_inside.wait(), 10)
        taken = await asyncio.wait_for(k.runner("B").drive("s1", fence=6), 10)
        assert len(calls) == 1, "the new holder ran the operation while it was in flight"
        waiting = await k.task("root.r1")
        assert waiting.status is TaskStatus.PENDING and waiting.retry_at is not None
        assert taken.next_wake_at is not None, "the wait is task state, with a wake time"
        release_a.set()
        assert (await stale).fenced
        await k.run()
        done = await k.task("root.r1")
        assert done.outcome is Outcome.SUCCEEDED and done.result == {"sent_to": "a@example.com"}
        assert len(calls) == 1, "the result of A's attempt is reused, not sent again"


async def test_a_fence_already_claimed_by_another_holder_is_refused(tmp_path: Path) -> None:
    entered: list[str] = []
    a_inside, release_a = asyncio.Event(), asyncio.Event()

    async def work(ctx: PhaseContext) -> Done:
        entered.append(ctx.services.runner_id)
        if ctx.services.runner_id == "A":
            a_inside.set()
            await release_a.wait()
        return Done(result=ctx.services.runner_id)

    registry = Registry()
    registry.add(kind("work", {"start": work}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("work")
        first = asyncio.create_task(k.runner("A").drive("s1", fence=5))
        await asyncio.wait_for(a_inside.wait(), 10)
        second = await asyncio.wait_for(k.runner("B").drive("s1", fence=5), 10)
        release_a.set()
        assert second.fenced and not (await first).fenced
        assert entered == ["A"], "two holders drove the session with one fence"
        (claim,) = await claims(k.store)
        assert claim.holder == "A", "the claim record names its holder"


async def test_a_holder_that_keeps_its_session_writes_no_new_claims(tmp_path: Path) -> None:
    # A one-day sleep, re-driven by one embedded runner under a clock that moves ten
    # minutes whenever it is read: every re-drive is by the same holder.
    class TickingClock:
        def __init__(self) -> None:
            self.now = utcnow()

        def __call__(self) -> datetime:
            self.now += timedelta(minutes=10)
            return self.now

    async def nap(ctx: PhaseContext) -> Sleep:
        return Sleep(until=ctx.now() + timedelta(days=1), next_phase="wake")

    async def wake(ctx: PhaseContext) -> Done:
        return Done(result="rested")

    registry = Registry()
    registry.add(kind("nap", {"start": nap, "wake": wake}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("nap")
        runner = k.runner("sleeper", clock=TickingClock())
        report = await run_until_idle(runner, "s1", longest_sleep=timedelta(0))
        assert not report.active and (await k.submission()).answer == "rested"
        handle = await k.store.session("s1")
        assert len(await claims(k.store)) == 1 and handle.fence == 1
