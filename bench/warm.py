"""Warm one-shot sandboxes against cold ones, the bare engine and Temporal (issue 17).

* ``sandbox``: one no-op run of the ``echo`` image, rounds interleaved: the bare engine
  (create, start, the engine's wait, read stdout — the least any caller must ask, the
  same hardened configuration), ``DockerSandbox.run`` cold, and ``DockerSandbox.run``
  warm (the pool refilled, untimed, before each measurement). The cold run's overhead
  over the bare engine is the Hands' own time around the engine. Also the bare engine
  with the CPU share over Docker's default 100 ms period (``--cpus``) instead of the
  sandbox's 1 s (the same share).
* ``call``: one no-op tool call end to end, from the submission to the answer commit,
  on two systems up at once that differ only in their Hands' pools
  (``BH_HANDS_WARM=*=4`` or none); rounds interleaved.
* ``burst``: 30 no-op tool calls submitted at once to each system, 30 Temporal
  workflows each running the same container with ``docker run --rm`` (the same
  hardening, CPU share and init), and 30 bare engine runs at once (create, start, wait,
  read, remove; no brainhands, no Temporal): calls per second from the first submission
  to the last answer, and the machine's CPU time per call (all processes, from
  ``/proc/stat``) — with one-shot containers, the engine's work per container is a
  floor no pool removes, and the bare burst measures it.

Needs Docker, the tool images (``bh images build``) and Redis/NATS (``bench.rig``
starts its own)::

    python -m bench.warm --repeats 20 --bursts 5 --out bench/results/warm.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
from temporalio.client import Client
from temporalio.worker import Worker

from bench.hands import HARDENED
from bench.rig import Rig, brain_argv, hands_argv, infrastructure, rig, scheduler_argv
from bench.stats import median, percentile
from bench.temporal import QUEUE, temporal_server
from bench.temporal_flows import OneCall, run_container
from contracts.tool import ToolDefinition
from hands.images import tool_tag
from hands.registry import register_image
from hands.sandbox import RunSpec
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import open_store

DOCKER = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
ECHO_ARGS = {"message": "hi"}
BURST = 30


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--only", choices=["sandbox", "call", "burst"], action="append")
    parser.add_argument("--out", default="bench/results/warm.json")
    args = parser.parse_args()
    only = set(args.only or ["sandbox", "call", "burst"])
    report: dict[str, Any] = {"repeats": args.repeats, "bursts": args.bursts}
    report["load_before"] = os.getloadavg()
    if "sandbox" in only:
        report["sandbox"] = await sandbox_runs(args.repeats)
        _say("sandbox", report["sandbox"])
    if only & {"call", "burst"}:
        report |= await system_runs(
            args.repeats if "call" in only else 0, args.bursts * ("burst" in only)
        )
    report["load_after"] = os.getloadavg()
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1, default=str))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(Path(args.out).write_text, json.dumps(report, indent=2) + "\n")


# -- the sandbox alone ----------------------------------------------------------------------


async def sandbox_runs(repeats: int) -> dict[str, Any]:
    store = await open_store("sqlite:///:memory:")
    owner = f"bench-warm-{uuid.uuid4().hex[:6]}"
    cold = DockerSandbox(DockerSandboxConfig(owner=owner, docker_url=DOCKER))
    warm = DockerSandbox(DockerSandboxConfig(owner=owner, docker_url=DOCKER, warm={"*": 1}))
    await cold.check()
    await warm.check()
    tool = await register_image(store, cold, tool_tag("echo"))
    engine = docker.APIClient(base_url=DOCKER, version="1.41")
    samples: dict[str, list[float]] = {
        name: [] for name in ("bare", "bare_period_100ms", "cold", "warm")
    }
    try:
        await _one(warm, tool)  # fills the pool
        for round_ in range(repeats + 1):  # round 0 warms up
            timed = {
                "bare": lambda: asyncio.to_thread(_bare, engine, cold, tool, docker_period=False),
                "bare_period_100ms": lambda: asyncio.to_thread(
                    _bare, engine, cold, tool, docker_period=True
                ),
                "cold": lambda: _one(cold, tool),
                "warm": lambda: _one(warm, tool),
            }
            names = list(timed) if round_ % 2 else list(reversed(timed))
            for name in names:
                await _until_warm(warm, tool)  # no refill overlaps what is timed
                elapsed = await timed[name]()
                if round_:
                    samples[name].append(elapsed)
            print(f"round {round_}: " + _brief(samples), file=sys.stderr)
    finally:
        engine.close()
        await warm.close()
        await cold.close()
        await store.close()
    medians = {name: median(values) for name, values in samples.items()}
    return {
        "p50_s": medians,
        "p90_s": {name: percentile(values, 0.9) for name, values in samples.items()},
        "hands_overhead_cold_s": medians["cold"] - medians["bare"],
        "warm_to_cold": medians["warm"] / medians["cold"],
        "period_1s_to_100ms": medians["bare"] / medians["bare_period_100ms"],
        "samples": samples,
    }


async def _one(sandbox: DockerSandbox, tool: ToolDefinition) -> float:
    spec = RunSpec(
        operation_id=f"op-{uuid.uuid4().hex}", session_id="bench", tool=tool, args=ECHO_ARGS
    )
    started = time.perf_counter()
    outcome = await sandbox.run(spec)
    elapsed = time.perf_counter() - started
    assert outcome.output and outcome.exit_code == 0, outcome
    await sandbox.remove(spec.operation_id)
    return elapsed


async def _until_warm(sandbox: DockerSandbox, tool: ToolDefinition) -> None:
    """Until the pool is full again and its refill's engine calls are over."""
    deadline = time.monotonic() + 60
    refilled = False
    while not any(sandbox.pool._ready.values()) or sandbox.warm.filling:
        if time.monotonic() > deadline:
            raise TimeoutError("the warm pool was not refilled within 60 s")
        refilled = True
        await asyncio.sleep(0.05)
    if refilled:
        await asyncio.sleep(0.3)  # the engine settles (the container's own start)


def _bare(
    engine: Any, sandbox: DockerSandbox, tool: ToolDefinition, *, docker_period: bool
) -> float:
    """create, start, wait, read stdout: the same image, command and hardening (with
    ``docker_period``, the CPU share over Docker's default 100 ms period, as
    ``--cpus`` gives it, instead of the sandbox's 1 s)."""
    host_config = sandbox._host_config(tool, [])
    if docker_period:
        period, quota = host_config.pop("CpuPeriod"), host_config.pop("CpuQuota")
        host_config["NanoCpus"] = int(quota / period * 1e9)
    operation = f"op-{uuid.uuid4().hex}"
    environment = {
        "BH_OPERATION_ID": operation,
        "BH_ARGUMENTS": json.dumps(ECHO_ARGS),
        "BH_MODE": "run",
    }
    started = time.perf_counter()
    created = engine.create_container(
        tool.image_id,
        command=list(tool.command or ()),
        user="65534:65534",
        environment=environment,
        host_config=host_config,
    )
    engine.start(created["Id"])
    engine.wait(created["Id"])
    out = engine.logs(created["Id"], stdout=True, stderr=False)
    elapsed = time.perf_counter() - started
    engine.remove_container(created["Id"], force=True)
    assert b"operation_id" in out, out
    return elapsed


# -- whole systems --------------------------------------------------------------------------


async def system_runs(repeats: int, bursts: int) -> dict[str, Any]:
    processes = {
        "scheduler": scheduler_argv(),
        "hands": hands_argv(),
        "brain": brain_argv(sandboxed=["echo"], concurrency=32),
    }
    report: dict[str, Any] = {}
    async with (
        temporal_server() as address,
        infrastructure() as infra,
        rig(processes, infra=infra, start=list(processes), tools=["echo"]) as cold,
        rig(
            processes,
            infra=infra,
            start=list(processes),
            tools=["echo"],
            env={"BH_HANDS_WARM": "*=4"},
        ) as warm,
    ):
        await cold.until_ready("brain")
        await warm.until_ready("brain")
        client = await Client.connect(address)
        worker = Worker(
            client,
            task_queue=QUEUE,
            workflows=[OneCall],
            activities=[run_container],
            max_concurrent_activities=BURST,
        )
        async with worker:
            if repeats:
                report["call"] = await _calls(cold, warm, repeats)
                _say("call", report["call"])
            if bursts:
                report["burst"] = await _bursts(cold, warm, client, bursts)
                _say("burst", report["burst"])
    return report


async def _calls(cold: Rig, warm: Rig, repeats: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"cold": [], "warm": []}
    systems = {"cold": cold, "warm": warm}
    for round_ in range(repeats + 1):
        names = ["cold", "warm"] if round_ % 2 else ["warm", "cold"]
        for name in names:
            await asyncio.sleep(0.5)  # the warm pool refills off the path
            elapsed = await _call(systems[name], f"call-{name}-{round_}-{uuid.uuid4().hex[:6]}")
            if round_:
                samples[name].append(elapsed)
        print(f"round {round_}: " + _brief(samples), file=sys.stderr)
    medians = {name: median(values) for name, values in samples.items()}
    return {
        "p50_s": medians,
        "p90_s": {name: percentile(values, 0.9) for name, values in samples.items()},
        "warm_to_cold": medians["warm"] / medians["cold"],
        "samples": samples,
    }


async def _call(system: Rig, session_id: str) -> float:
    task: dict[str, Any] = {"kind": "one-call", "input": {"tool": "echo", "args": ECHO_ARGS}}
    started = time.time()
    await system.submit(session_id, {"task": task})
    answered = await system.until_answered([session_id], within=120, every=0.005)
    return answered[session_id] - started


async def _bursts(cold: Rig, warm: Rig, client: Client, bursts: int) -> dict[str, Any]:
    docker_flags = [*HARDENED, "--cpu-period", "1000000", "--cpu-quota", "250000", "--init"]
    names = ["cold", "warm", "temporal", "bare"]
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    bare = DockerSandbox(DockerSandboxConfig(owner="bench-warm-bare", docker_url=DOCKER))
    await bare.check()
    tool = await register_image(cold.store, bare, tool_tag("echo"))
    try:
        for round_ in range(bursts):
            order = names if round_ % 2 else list(reversed(names))
            for name in order:
                await asyncio.sleep(3)  # the warm pool refills, the engine settles
                busy = _cpu_seconds()
                if name == "temporal":
                    elapsed = await _temporal_burst(client, docker_flags)
                elif name == "bare":
                    elapsed = await _bare_burst(bare, tool)
                else:
                    elapsed = await _burst(cold if name == "cold" else warm, name, round_)
                cpu[name].append((_cpu_seconds() - busy) / BURST)
                samples[name].append(BURST / elapsed)
            print(f"burst {round_}: " + _brief(samples), file=sys.stderr)
    finally:
        await bare.close()
    medians = {name: median(values) for name, values in samples.items()}
    return {
        "calls_per_s": medians,
        "cpu_s_per_call": {name: median(values) for name, values in cpu.items()},
        "cores": os.cpu_count(),
        "warm_to_cold": medians["warm"] / medians["cold"],
        "warm_to_temporal": medians["warm"] / medians["temporal"],
        "warm_to_bare": medians["warm"] / medians["bare"],
        "samples": samples,
    }


async def _bare_burst(sandbox: DockerSandbox, tool: ToolDefinition) -> float:
    """30 bare engine runs at once, each on a client of its own (as 30 ``docker run``)."""

    def one() -> None:
        engine = docker.APIClient(base_url=DOCKER, version="1.41")
        try:
            _bare(engine, sandbox, tool, docker_period=False)
        finally:
            engine.close()

    started = time.perf_counter()
    await asyncio.gather(*(asyncio.to_thread(one) for _ in range(BURST)))
    return time.perf_counter() - started


def _cpu_seconds() -> float:
    """CPU time the whole machine has spent busy so far (``/proc/stat``: every state
    but idle and iowait), in seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(value) for value in fields]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


async def _burst(system: Rig, name: str, round_: int) -> float:
    task: dict[str, Any] = {"kind": "one-call", "input": {"tool": "echo", "args": ECHO_ARGS}}
    sessions = [f"burst-{name}-{round_}-{n}-{uuid.uuid4().hex[:6]}" for n in range(BURST)]
    started = time.time()
    await asyncio.gather(*(system.submit(s, {"task": task}) for s in sessions))
    answered = await system.until_answered(sessions, within=300, every=0.05)
    return max(answered.values()) - started


async def _temporal_burst(client: Client, flags: list[str]) -> float:
    started = time.time()
    handles = await asyncio.gather(
        *(
            client.start_workflow(
                OneCall.run,
                _docker_argv(flags),
                id=f"bench-{uuid.uuid4().hex}",
                task_queue=QUEUE,
            )
            for _ in range(BURST)
        )
    )
    await asyncio.gather(*(handle.result() for handle in handles))
    closed = [(await handle.describe()).close_time for handle in handles]
    return max(c.timestamp() for c in closed if c is not None) - started


def _docker_argv(flags: list[str]) -> list[str]:
    env = ["-e", f"BH_OPERATION_ID=op-{uuid.uuid4().hex}", "-e", "BH_MODE=run"]
    env += ["-e", f"BH_ARGUMENTS={json.dumps(ECHO_ARGS)}"]
    return ["docker", "-H", DOCKER, "run", "--rm", *flags, *env, tool_tag("echo")]


def _brief(samples: dict[str, list[float]]) -> str:
    return ", ".join(f"{k} {v[-1] * 1000:.0f}" for k, v in samples.items() if v)


def _say(what: str, section: dict[str, Any]) -> None:
    print(what, json.dumps({k: v for k, v in section.items() if k != "samples"}), file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
