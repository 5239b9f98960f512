"""The tool path's cost: no-op round trips through the Hands beside a raw ``docker run``,
a whole tool call through the Brain beside the same tool in-process, and throughput.

* ``roundtrip``: a dispatch published on JetStream → the result event received, for the
  ``echo`` image, interleaved one-for-one with ``docker run --rm`` of the same image
  with the same hardening flags (the baseline, in the same run).
* ``brain``: one task that makes one tool call, embedded runner, from submission to
  the apply commit: ``echo`` sandboxed on the Hands vs an in-process coroutine.
* ``throughput``: 20 no-op operations dispatched at once, 1 and 2 Hands instances
  (concurrency 4 each), wall time to the last result.

Needs Docker and NATS (``bh dev up``) and the tool images (``bh images build``)::

    python -m bench.hands --runs 30 --out bench/results/hands.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from bench.stats import median, percentile
from brain.context import PhaseContext
from brain.embedded import run_until_idle
from brain.outcome import Done, Effects, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.relay import OutboxRelay
from brain.results import ResultWaiter
from brain.runner import SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher, ToolSpec
from bus import DISPATCH_STREAM, RESULTS_STREAM, Bus, BusSettings, dispatch_subject
from contracts import ReplayPolicy, utcnow
from contracts.tool import Dispatch, ResultEvent
from hands.executor import Executor
from hands.images import tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from hands.service import ConsumerSettings, HandsService, publisher
from runtime.cancellation import cancel_and_wait
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.intents import commit_intent

DOCKER = "unix:///var/run/docker.sock"
HARDENED = [
    "--read-only",
    "--tmpfs",
    "/tmp:size=1m,mode=1777,noexec,nosuid,nodev",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    "--user",
    "65534:65534",
    "--network",
    "none",
    "--pids-limit",
    "16",
    "--memory",
    "64m",
]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--nats", default="nats://127.0.0.1:14222")
    parser.add_argument("--docker", default=DOCKER)
    parser.add_argument("--out", default="bench/results/hands.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hands-"))
    report: dict[str, Any] = {"runs": args.runs}
    report["roundtrip"] = await roundtrip(work, args.nats, args.docker, args.runs)
    _say("roundtrip", report["roundtrip"])
    report["brain"] = await brain_call(work, args.nats, args.docker, args.runs)
    _say("brain", report["brain"])
    report["throughput"] = {
        str(n): await throughput(work, args.nats, args.docker, hands=n) for n in (1, 2)
    }
    _say("throughput", report["throughput"])
    await asyncio.to_thread(Path(args.out).write_text, json.dumps(report, indent=2) + "\n")


@asynccontextmanager
async def rig(
    work: Path, nats: str, docker: str, *, hands: int = 1
) -> AsyncIterator[tuple[SessionStore, Bus, list[Executor]]]:
    store = await open_store(f"sqlite:///{work}/{uuid.uuid4().hex[:8]}.db")
    bus = await Bus.connect(BusSettings(url=nats, namespace=f"b{uuid.uuid4().hex[:10]}"))
    sandboxes = [
        DockerSandbox(DockerSandboxConfig(owner="bench-hands", docker_url=docker))
        for _ in range(hands)
    ]
    services, executors, tasks = [], [], []
    try:
        await register_image(store, sandboxes[0], tool_tag("echo"))
        for number, sandbox in enumerate(sandboxes):
            executor = Executor(
                store=store, sandbox=sandbox, publish=publisher(bus), executor_id=f"h{number}"
            )
            service = HandsService(
                bus=bus, executor=executor, settings=ConsumerSettings(concurrency=4)
            )
            executors.append(executor)
            services.append(service)
            tasks.append(asyncio.create_task(service.run()))
        yield store, bus, executors
    finally:
        for service in services:
            await service.shutdown()
        await cancel_and_wait(*tasks)
        for sandbox in sandboxes:
            await sandbox.close()
        for stream in (DISPATCH_STREAM, RESULTS_STREAM):
            with contextlib.suppress(Exception):
                await bus.js.delete_stream(bus.stream(stream))
        await bus.close()
        await store.close()


async def roundtrip(work: Path, nats: str, docker: str, runs: int) -> dict[str, float]:
    hands, raw = [], []
    async with rig(work, nats, docker) as (store, bus, _):
        arrived: dict[str, asyncio.Event] = {}

        async def on_result(message: Msg) -> None:
            event = ResultEvent.model_validate_json(message.data)
            if event.operation_id in arrived:
                arrived[event.operation_id].set()

        subscription = await bus.listen("tools.results.bench", on_result)
        for index in range(runs + 2):  # the first two warm up both paths
            op = f"op-bench-{uuid.uuid4().hex[:12]}"
            arrived[op] = asyncio.Event()
            dispatch = Dispatch(
                operation_id=op, session_id="bench", tool="echo", tool_version=1, args={}
            )
            # what the Brain's commit holds before its relay publishes (untimed here)
            await commit_intent(store, dispatch)
            started = time.perf_counter()
            await bus.publish(dispatch_subject("echo"), dispatch, msg_id=op)
            await asyncio.wait_for(arrived[op].wait(), 60)
            elapsed = time.perf_counter() - started
            baseline = await asyncio.to_thread(_raw_run, docker, op)
            if index >= 2:
                hands.append(elapsed)
                raw.append(baseline)
        await subscription.unsubscribe()
    return {
        "hands_p50_ms": median(hands) * 1000,
        "hands_p99_ms": percentile(hands, 0.99) * 1000,
        "raw_p50_ms": median(raw) * 1000,
        "raw_p99_ms": percentile(raw, 0.99) * 1000,
        "ratio_p50": median(hands) / median(raw),
    }


def _raw_run(docker: str, op: str) -> float:
    env = ["-e", f"BH_OPERATION_ID={op}", "-e", "BH_MODE=run", "-e", "BH_ARGUMENTS={}"]
    started = time.perf_counter()
    subprocess.run(
        ["docker", "-H", docker, "run", "--rm", *HARDENED, *env, tool_tag("echo")],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


async def _one_call(ctx: PhaseContext) -> PhaseOutcome:
    performed = await ctx.operation("echo", {"message": "hi"}, "call")
    applied = Effects(applied_operations=(performed.operation_id,))
    return Done(result=performed.output, effects=applied)


async def brain_call(work: Path, nats: str, docker: str, runs: int) -> dict[str, float]:
    registry = Registry()
    registry.add(TaskKind("one-call", 1, {"start": _one_call}))
    sandboxed, local = [], []
    async with rig(work, nats, docker) as (store, bus, _):
        definition = await store.tools.get("echo", 1)
        assert definition is not None
        remote_tools = LocalDispatcher()
        remote_tools.add_sandboxed(definition)
        local_tools = LocalDispatcher()

        async def echo(args: dict[str, Any], operation_id: str) -> Any:
            return {"echo": args, "operation_id": operation_id}

        local_tools.register(ToolSpec(name="echo", replay=ReplayPolicy.SAFE), echo)
        for index in range(runs + 2):
            remote = await _time_call(store, registry, remote_tools, bus, f"r{index}")
            in_process = await _time_call(store, registry, local_tools, None, f"l{index}")
            if index >= 2:
                sandboxed.append(remote)
                local.append(in_process)
    return {
        "sandboxed_p50_ms": median(sandboxed) * 1000,
        "sandboxed_p99_ms": percentile(sandboxed, 0.99) * 1000,
        "in_process_p50_ms": median(local) * 1000,
        "in_process_p99_ms": percentile(local, 0.99) * 1000,
        "added_p50_ms": (median(sandboxed) - median(local)) * 1000,
    }


async def _time_call(
    store: SessionStore, registry: Registry, tools: LocalDispatcher, bus: Bus | None, session: str
) -> float:
    crash = CrashPoints()
    services = Services(
        store=store,
        tools=tools,
        crash=crash,
        clock=utcnow,
        runner_id="bench",
        relay=None if bus is None else OutboxRelay(bus, crash, store),
    )
    runner = SessionRunner(store, registry, services)
    started = time.perf_counter()
    await SessionClient(store).submit(session, "r1", {"task": {"kind": "one-call"}})
    if bus is None:
        await run_until_idle(runner, session)
    else:
        async with ResultWaiter(bus, session) as results:
            await run_until_idle(runner, session, results=results)
    return time.perf_counter() - started


async def throughput(work: Path, nats: str, docker: str, *, hands: int) -> dict[str, float]:
    count = 20
    async with rig(work, nats, docker, hands=hands) as (store, bus, _executors):
        done = asyncio.Event()
        seen: set[str] = set()

        async def on_result(message: Msg) -> None:
            seen.add(ResultEvent.model_validate_json(message.data).operation_id)
            if len(seen) >= count:
                done.set()

        subscription = await bus.listen("tools.results.bench", on_result)
        dispatches = [
            Dispatch(
                operation_id=f"op-tp-{uuid.uuid4().hex[:12]}",
                session_id="bench",
                tool="echo",
                tool_version=1,
                args={},
            )
            for _ in range(count)
        ]
        await commit_intent(store, *dispatches)  # one fan-out commit, as a Brain's
        started = time.perf_counter()
        for dispatch in dispatches:
            await bus.publish(dispatch_subject("echo"), dispatch, msg_id=dispatch.operation_id)
        await asyncio.wait_for(done.wait(), 300)
        elapsed = time.perf_counter() - started
        await subscription.unsubscribe()
    return {"operations": count, "seconds": elapsed, "per_second": count / elapsed}


def _say(name: str, figures: object) -> None:
    print(f"{name}: {json.dumps(figures, indent=1)}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
