"""How many sessions Brains hold in model calls at once (issue 17, goal 4).

``--brains`` Brain processes (``--slots`` each) and the scheduler (a model call that
failed is retried at a delayed wake), the scripted model answering every request after
``--delay`` seconds (or a random time up to ``--delay-max``), the store on SQLite, Redis
and NATS of the benchmark's own (``bench.rig``). Each round submits ``--sessions``
one-round agent sessions and wakes them all; measured per round:

* the wall time from the first wake to the last answer commit, and its ratio to the
  model's mean delay (the same-run baseline: 1.0 would mean every session waited for
  the model exactly once, all at the same time), and sessions answered per second;
* the model server's peak of requests in flight (the Brains' slots, their model
  clients' connection pools);
* the Brains' resident memory at its peak over their idle memory (before the first
  round), per session;
* the Brains' Redis connections (by the names they give them), idle and at the peak,
  per Brain.

The round ends when the store's active index is empty (every session answered: a
one-round session finishes with its answer), read every second — a listing of 16 shards,
not a load of each session; every session is then checked answered. Medians over
``--repeats`` rounds (plus one warm-up round)::

    python -m bench.scale --repeats 5 --sessions 1000 --slots 1000 --delay 30
    python -m bench.scale --repeats 3 --sessions 10000 --brains 4 --slots 1000 \\
        --delay 1 --delay-max 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.rig import Rig, brain_argv, infrastructure, rig, scheduler_argv
from bench.stats import median

_PAGE = os.sysconf("SC_PAGE_SIZE")
#: sessions submitted (committed) at once while a round is set up
_SUBMITS = 16


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--brains", type=int, default=1)
    parser.add_argument("--slots", type=int, default=1000, help="per Brain")
    parser.add_argument("--delay", type=float, default=2.0, help="model delay, s")
    parser.add_argument("--delay-max", type=float, default=None, help="random delay up to, s")
    parser.add_argument("--out", default="bench/results/scale.json")
    args = parser.parse_args()
    turn: dict[str, Any] = {"content": "done", "delay_seconds": args.delay}
    if args.delay_max is not None:
        turn["delay_max_seconds"] = args.delay_max
    model = {"model": "scripted", "turns": [turn]}
    mean_delay = (args.delay + (args.delay_max or args.delay)) / 2
    report: dict[str, Any] = {
        "brains": args.brains,
        "slots_per_brain": args.slots,
        "sessions": args.sessions,
        "model_delay_s": [args.delay, args.delay_max or args.delay],
        "load_before": os.getloadavg()[0],
    }
    names = [f"brain-{n}" for n in range(args.brains)]
    processes = {"scheduler": scheduler_argv()}
    processes |= {name: brain_argv(concurrency=args.slots) for name in names}
    rounds: list[dict[str, float]] = []
    async with (
        infrastructure() as infra,
        rig(processes, infra=infra, start=["scheduler"], model=model) as system,
    ):
        without = await _clients(system)
        for name in names:
            system.fleet.start(name)
        for name in names:
            await system.until_ready(name)
        await asyncio.sleep(2)  # settled: imports done, first beats written
        pids = [system.fleet.processes[name].pid for name in names]
        report["idle_rss_mb"] = sum(_rss(pid) for pid in pids) / 2**20
        report["idle_redis_connections_per_brain"] = (await _clients(system) - without) / len(names)
        for round_ in range(args.repeats + 1):
            sample = await _round(system, f"r{round_}", args.sessions, pids)
            sample["redis_connections_per_brain"] = (sample.pop("clients") - without) / len(names)
            _say(f"round {round_}{' (warm-up)' if not round_ else ''}", sample)
            if round_:
                rounds.append(sample)
    report["load_after"] = os.getloadavg()[0]
    report["rounds"] = rounds
    for key in (
        "wall_s",
        "answered_per_s",
        "peak_in_flight",
        "rss_mb",
        "redis_connections_per_brain",
    ):
        report[f"median_{key}"] = median([r[key] for r in rounds])
    report["wall_over_model_delay"] = report["median_wall_s"] / mean_delay
    report["memory_per_session_kb"] = (
        (report["median_rss_mb"] - report["idle_rss_mb"]) * 1024 / args.sessions
    )
    print(json.dumps(report, indent=2))
    await asyncio.to_thread(_save, Path(args.out), report)


async def _round(system: Rig, tag: str, count: int, pids: list[int]) -> dict[str, float]:
    names = [f"{tag}-{n}" for n in range(count)]
    gate = asyncio.Semaphore(_SUBMITS)

    async def submit(name: str) -> None:
        async with gate:
            await system.submit(name, {"text": f"scale session {name}"}, wake=False)

    await asyncio.gather(*(submit(name) for name in names))
    await system.probe(reset=True)
    peak = {"rss": 0, "clients": 0}
    watching = asyncio.create_task(_watch(system, pids, peak))
    started = time.time()
    try:
        await system.wake_all(names, at_once=64)
        await _until_idle(system, within=1800)
        ended = time.time()
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    await _all_answered(system, names)
    probe = await system.probe()
    return {
        "wall_s": ended - started,
        "answered_per_s": count / (ended - started),
        "peak_in_flight": float(probe["peak"]),
        "rss_mb": peak["rss"] / 2**20,
        "clients": float(peak["clients"]),
    }


async def _until_idle(system: Rig, *, within: float) -> None:
    """Until the active index is empty: every session finished (a listing, no loads)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left, _ = await system.store.some_active_sessions(1)
        if not left:
            return
        await asyncio.sleep(1.0)
    raise TimeoutError(f"sessions still active after {within} s")


async def _all_answered(system: Rig, names: list[str]) -> None:
    gate = asyncio.Semaphore(32)

    async def check(name: str) -> None:
        async with gate:
            handle = await system.store.session(name)
            submission = await handle.submission("r1")
            assert submission is not None and submission.status.value == "answered", name

    await asyncio.gather(*(check(name) for name in names))


async def _watch(system: Rig, pids: list[int], peak: dict[str, int]) -> None:
    """The Brains' resident memory and Redis's client count, at their highest."""
    while True:
        peak["rss"] = max(peak["rss"], sum(_rss(pid) for pid in pids))
        peak["clients"] = max(peak["clients"], await _clients(system))
        await asyncio.sleep(0.2)


def _rss(pid: int | None) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


async def _clients(system: Rig) -> int:
    """The Brains' connections: by the names they give them (``brain-<pid>``, and the
    wake consumer's ``<holder>.wakes``) — not the benchmark's own."""
    names = [str(client.get("name", "")) for client in await system.redis.client_list()]
    return sum(1 for name in names if name.startswith("brain-") or name.endswith(".wakes"))


def _save(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def _say(name: str, figures: dict[str, float]) -> None:
    print(f"{name}: {json.dumps({k: round(v, 3) for k, v in figures.items()})}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
