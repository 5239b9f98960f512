"""The task kernel on the embedded store: phases, retries, joins, sleeps, cancellation,
blocked kinds and migrations. Crash behaviour lives in tests/chaos/."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, Effects, Fail, Next, Retry, Sleep, TaskSpec, Wait
from brain.registry import Backoff, Migration, Registry, TaskKind
from contracts import (
    Commit,
    ErrorInfo,
    JoinPolicy,
    NotFound,
    Outcome,
    SubmissionStatus,
    Task,
    TaskStatus,
)
from tests.support.kernel import kernel, task_history

FAST = Backoff(initial=timedelta(milliseconds=10))


def kind(name: str, phases: dict[str, object], **options: object) -> TaskKind:
    return TaskKind(name=name, version=1, phases=phases, backoff=FAST, **options)  # type: ignore[arg-type]


async def test_phases_run_in_order_and_the_answer_reaches_the_submission(tmp_path: Path) -> None:
    async def start(ctx: PhaseContext) -> Next:
        return Next(phase="double", effects=Effects(memo={"n": ctx.input["n"]}))

    async def double(ctx: PhaseContext) -> Done:
        return Done(result=2 * int(ctx.memo["n"]))  # type: ignore[call-overload]

    registry = Registry()
    registry.add(kind("calc", {"start": start, "double": double}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("calc", {"n": 21})
        report = await k.run()
        assert not report.active and report.phases == 2
        submission = await k.submission()
        assert (submission.status, submission.answer) == (SubmissionStatus.ANSWERED, 42)
        root = await k.task("root.r1")
        assert (root.outcome, root.settled_by) == (Outcome.SUCCEEDED, report.runner_id)


async def test_resubmitting_a_request_id_returns_the_original_and_creates_no_work(
    tmp_path: Path,
) -> None:
    async with kernel(tmp_path) as k:
        first = await k.client.submit("s1", "req", {"text": "hello"})
        seq = (await k.store.session("s1")).seq
        again = await k.client.submit("s1", "req", {"text": "something else"})
        assert again == first and (await k.store.session("s1")).seq == seq


async def test_retries_back_off_and_give_up_after_max_attempts(tmp_path: Path) -> None:
    calls: list[int] = []

    async def flaky(ctx: PhaseContext) -> Retry | Done:
        calls.append(ctx.attempt)
        return Done(result="ok") if ctx.attempt == 3 else Retry(reason="not yet")

    async def hopeless(ctx: PhaseContext) -> Retry:
        return Retry(reason="never")

    registry = Registry()
    registry.add(kind("flaky", {"start": flaky}))
    registry.add(kind("hopeless", {"start": hopeless}, max_attempts=2))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("flaky")
        await k.submit_task("hopeless", request_id="r2")
        await k.run()
        assert calls == [1, 2, 3]
        assert (await k.submission()).answer == "ok"
        failed = await k.submission("r2")
        assert failed.status is SubmissionStatus.FAILED
        assert failed.error is not None and failed.error.code == "attempts_exhausted"


def _parent(join: JoinPolicy, children: list[str]) -> dict[str, object]:
    async def start(ctx: PhaseContext) -> Wait:
        spawn = tuple(TaskSpec(id=f"{ctx.task.id}.{name}", kind=name) for name in children)
        return Wait(
            tasks=tuple(s.id for s in spawn),
            join=join,
            next_phase="collect",
            effects=Effects(spawn=spawn),
        )

    async def collect(ctx: PhaseContext) -> Done:
        return Done(result={t.kind: t.outcome for t in ctx.children()})

    return {"start": start, "collect": collect}


def _children(registry: Registry) -> None:
    async def ok(ctx: PhaseContext) -> Done:
        return Done(result="ok")

    async def boom(ctx: PhaseContext) -> Fail:
        return Fail(error=ErrorInfo(code="boom", message="child failed"))

    async def slow(ctx: PhaseContext) -> Sleep:
        return Sleep(until=ctx.now() + timedelta(hours=1), next_phase="start")

    registry.add(kind("ok", {"start": ok}))
    registry.add(kind("boom", {"start": boom}))
    registry.add(kind("slow", {"start": slow}))


async def test_all_settled_waits_for_every_child(tmp_path: Path) -> None:
    registry = Registry()
    _children(registry)
    registry.add(kind("parent", _parent(JoinPolicy.ALL_SETTLED, ["ok", "boom"])))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("parent")
        await k.run()
        assert (await k.submission()).answer == {"ok": "succeeded", "boom": "failed"}


async def test_fail_fast_cancels_siblings_and_passes_through_completing(tmp_path: Path) -> None:
    registry = Registry()
    _children(registry)
    registry.add(kind("parent", _parent(JoinPolicy.FAIL_FAST, ["slow", "boom"])))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("parent")
        await k.run()
        root = await k.task("root.r1")
        statuses = [t.status for t in await task_history(k.store, "s1", "root.r1")]
        assert statuses[-2:] == [TaskStatus.COMPLETING, TaskStatus.TERMINAL]
        assert root.status is TaskStatus.TERMINAL and root.outcome is Outcome.FAILED
        assert root.error is not None and root.error.code == "boom"
        assert (await k.task("root.r1.slow")).outcome is Outcome.CANCELLED
        assert (await k.submission()).status is SubmissionStatus.FAILED


async def test_sleeping_task_wakes_when_its_time_comes(tmp_path: Path) -> None:
    async def start(ctx: PhaseContext) -> Sleep:
        return Sleep(until=ctx.now() + timedelta(milliseconds=300), next_phase="wake")

    async def wake(ctx: PhaseContext) -> Done:
        return Done(result=ctx.now().isoformat())

    registry = Registry()
    registry.add(kind("nap", {"start": start, "wake": wake}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("nap")
        first = await k.runner().drive("s1")
        assert first.active and first.next_wake_at is not None
        assert (await k.task("root.r1")).status is TaskStatus.SLEEPING
        await k.run()
        done = await k.task("root.r1")
        assert done.outcome is Outcome.SUCCEEDED
        assert done.result >= first.next_wake_at.isoformat()  # type: ignore[operator]


async def test_unknown_kind_is_blocked_untouched_then_runs_with_a_handler(tmp_path: Path) -> None:
    async def run(ctx: PhaseContext) -> Done:
        return Done(result="finally")

    async with kernel(tmp_path) as k:
        await k.submit_task("mystery")
        report = await k.run()
        root = await k.task("root.r1")
        assert "mystery@1" in report.blocked["root.r1"] and report.active
        assert root.status is TaskStatus.PENDING and root.rev == 1, "a blocked task is untouched"
        k.registry.add(kind("mystery", {"start": run}))
        await k.run()
        assert (await k.submission()).answer == "finally"


async def test_old_versions_migrate_before_they_run(tmp_path: Path) -> None:
    async def run(ctx: PhaseContext) -> Done:
        return Done(result={"version": ctx.task.version, "input": ctx.input})

    def v1_to_v2(task: Task) -> Task:
        return task.model_copy(update={"input": {"upgraded": task.input}})

    registry = Registry()
    registry.add(TaskKind(name="job", version=2, phases={"start": run}))
    registry.add_migration(Migration("job", 1, 2, v1_to_v2))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("job", "old")
        await k.run()
        assert (await k.submission()).answer == {"version": 2, "input": {"upgraded": "old"}}


async def test_cancelling_twice_stops_a_tree_once(tmp_path: Path) -> None:
    registry = Registry()
    _children(registry)
    registry.add(kind("parent", _parent(JoinPolicy.ALL_SETTLED, ["slow", "ok"])))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("parent")
        await k.runner().drive("s1")
        assert (await k.task("root.r1.slow")).status is TaskStatus.SLEEPING
        await k.client.cancel("s1", request_id="r1", reason="user changed their mind")
        await k.client.cancel("s1", request_id="r1", reason="user changed their mind")
        await k.run()
        session = await k.store.session("s1")
        outcomes = {t.id: t.outcome for t in session.state.tasks.values()}
        assert outcomes == {
            "root.r1": Outcome.CANCELLED,
            "root.r1.slow": Outcome.CANCELLED,
            "root.r1.ok": Outcome.SUCCEEDED,  # it had finished before the request
        }
        assert session.state.submissions["r1"].status is SubmissionStatus.CANCELLED
        assert session.state.tasks["root.r1"].reason == "user changed their mind"
        cancels = [t for t in await task_history(k.store, "s1", "root.r1") if t.cancel_requested]
        assert cancels[0].status is not TaskStatus.TERMINAL, "the intent is committed first"
        assert not session.state.is_active


async def test_cancellation_stops_an_active_phase(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def forever(ctx: PhaseContext) -> Done:
        started.set()
        await asyncio.sleep(3600)
        return Done(result="never")

    registry = Registry()
    registry.add(kind("stuck", {"start": forever}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("stuck")
        drive = asyncio.create_task(k.run())
        await started.wait()
        await k.client.cancel("s1", task_id="root.r1", reason="operator")
        report = await asyncio.wait_for(drive, 10)
        assert not report.active
        assert (await k.task("root.r1")).outcome is Outcome.CANCELLED


@pytest.mark.parametrize("max_crashes", [1, 3])
async def test_restart_limit_fails_a_phase_found_running_too_often(
    tmp_path: Path, max_crashes: int
) -> None:
    # What a dead process leaves behind: the phase's attempt is on record as running.
    ran: list[int] = []

    async def start(ctx: PhaseContext) -> Done:
        ran.append(ctx.attempt)
        return Done(result="survived")

    registry = Registry()
    registry.add(kind("fragile", {"start": start}, max_crashes=max_crashes))
    async with kernel(tmp_path, registry) as k:
        await k.client.submit("s1", "r1", {"task": {"kind": "unregistered"}})
        await k.run()  # creates the root task; it stays blocked
        handle = await k.store.session("s1")
        root = handle.state.tasks["root.r1"]
        crashed = root.model_copy(
            update={
                "kind": "fragile",
                "status": TaskStatus.RUNNING,
                "attempts": max_crashes,
                "crashes": max_crashes - 1,  # this start is the max_crashes-th to die
                "rev": root.rev + 1,
            }
        )
        dead = handle.fence + 1
        await handle.claim(dead, holder="a process that died")
        await handle.commit(Commit(tasks=(crashed,)), fence=dead)
        await k.run()
        failed = await k.task("root.r1")
        assert failed.outcome is Outcome.FAILED and ran == []
        assert failed.error is not None and failed.error.code == "restart_limit"
        assert f"crashed its executor {max_crashes} times" in failed.error.message


async def test_a_client_waits_for_the_answer_while_a_runner_works(tmp_path: Path) -> None:
    async def slow(ctx: PhaseContext) -> Done:
        await asyncio.sleep(0.2)
        return Done(result="worth the wait")

    registry = Registry()
    registry.add(kind("slow", {"start": slow}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("slow")
        with pytest.raises(TimeoutError):
            await k.client.wait("s1", "r1", within=timedelta(milliseconds=50))
        running = asyncio.create_task(k.run())
        answered = await k.client.wait("s1", "r1", within=timedelta(seconds=10))
        await running
        assert (answered.status, answered.answer) == (SubmissionStatus.ANSWERED, "worth the wait")
        assert await k.client.get("s1", "r1") == answered
        with pytest.raises(NotFound):
            await k.client.wait("s1", "nope", within=timedelta(seconds=1))


async def test_a_stale_runner_is_fenced_out_by_a_newer_claim(tmp_path: Path) -> None:
    # Runner A stalls inside a phase; runner B claims the session with a newer fence,
    # re-runs the interrupted phase and finishes. A's late outcome must not land.
    release_a, a_inside = asyncio.Event(), asyncio.Event()
    entered: list[str] = []

    async def work(ctx: PhaseContext) -> Done:
        entered.append(ctx.services.runner_id)
        if ctx.services.runner_id == "A":
            a_inside.set()
            await release_a.wait()
        return Done(result=f"done by {ctx.services.runner_id}")

    registry = Registry()
    registry.add(kind("work", {"start": work}))
    async with kernel(tmp_path, registry) as k:
        await k.submit_task("work")
        stale = asyncio.create_task(k.runner("A").drive("s1", fence=5))
        await asyncio.wait_for(a_inside.wait(), 10)
        fresh = await k.runner("B").drive("s1", fence=6)
        release_a.set()
        old = await stale
        assert old.fenced and not fresh.fenced
        assert entered == ["A", "B"]
        root = await k.task("root.r1")
        assert (root.result, root.settled_by, root.attempts) == ("done by B", "B", 2)
        assert (await k.submission()).answer == "done by B"
