"""How many sessions one Brain holds in model calls at once (issue 17, goal 4).

One Brain process (``--slots``, 1,000 by default) and the scheduler (a model call that
failed is retried at a delayed wake), the scripted model answering every
request after ``--delay`` seconds, the store on SQLite, Redis and NATS of the benchmark's
own (``bench.rig``). Each round submits ``--sessions`` one-round agent sessions and wakes
them at once; measured per round:

* the wall time from the first wake to the last answer commit, and its ratio to the
  model's delay (the same-run baseline: 1.0 would mean every session waited for the
  model exactly once, all at the same time);
* the model server's peak of requests in flight (the Brain's slots, its model client's
  connection pool);
* the Brain's resident memory at its peak over its idle memory (before the first round),
  per session;
* the Brain's Redis connections (``INFO clients`` with and without it) idle and at the
  peak.

Medians over ``--repeats`` rounds (plus one warm-up round)::

    python -m bench.scale --repeats 5 --sessions 1000 --slots 1000
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=2.0, help="model delay, s")
    parser.add_argument("--out", default="bench/results/scale.json")
    args = parser.parse_args()
    model = {"model": "scripted", "turns": [{"content": "done", "delay_seconds": args.delay}]}
    report: dict[str, Any] = {
        "slots": args.slots,
        "sessions": args.sessions,
        "model_delay_s": args.delay,
        "load_before": os.getloadavg()[0],
    }
    rounds: list[dict[str, float]] = []
    async with (
        infrastructure() as infra,
        rig(
            {"scheduler": scheduler_argv(), "brain": brain_argv(concurrency=args.slots)},
            infra=infra,
            start=["scheduler"],
            model=model,
        ) as system,
    ):
        without = await _clients(system)
        system.fleet.start("brain")
        await system.until_ready("brain")
        await asyncio.sleep(2)  # settled: imports done, first beats written
        pid = system.fleet.processes["brain"].pid
        report["idle_rss_mb"] = _rss(pid) / 2**20
        report["idle_redis_connections"] = await _clients(system) - without
        for round_ in range(args.repeats + 1):
            sample = await _round(system, f"r{round_}", args.sessions, pid)
            sample["redis_connections"] -= without
            _say(f"round {round_}{' (warm-up)' if not round_ else ''}", sample)
            if round_:
                rounds.append(sample)
    report["load_after"] = os.getloadavg()[0]
    report["rounds"] = rounds
    for key in ("wall_s", "peak_in_flight", "rss_mb", "redis_connections"):
        report[f"median_{key}"] = median([r[key] for r in rounds])
    report["wall_over_model_delay"] = report["median_wall_s"] / args.delay
    report["memory_per_session_kb"] = (
        (report["median_rss_mb"] - report["idle_rss_mb"]) * 1024 / args.sessions
    )
    print(json.dumps(report, indent=2))
    await asyncio.to_thread(_save, Path(args.out), report)


async def _round(system: Rig, tag: str, count: int, pid: int | None) -> dict[str, float]:
    names = [f"{tag}-{n}" for n in range(count)]
    for name in names:
        await system.submit(name, {"text": f"scale session {name}"}, wake=False)
    await system.probe(reset=True)
    peak = {"rss": 0, "clients": 0}
    watching = asyncio.create_task(_watch(system, pid, peak))
    started = time.time()
    try:
        await system.wake_all(names, at_once=64)
        answered = await system.until_answered(names, within=600, every=2.0)
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    probe = await system.probe()
    return {
        "wall_s": max(answered.values()) - started,
        "peak_in_flight": float(probe["peak"]),
        "rss_mb": peak["rss"] / 2**20,
        "redis_connections": float(peak["clients"]),
    }


async def _watch(system: Rig, pid: int | None, peak: dict[str, int]) -> None:
    """The Brain's resident memory and Redis's client count, at their highest."""
    while True:
        peak["rss"] = max(peak["rss"], _rss(pid))
        peak["clients"] = max(peak["clients"], await _clients(system))
        await asyncio.sleep(0.2)


def _rss(pid: int | None) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


async def _clients(system: Rig) -> int:
    info = await system.redis.info("clients")
    return int(info["connected_clients"])


def _save(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def _say(name: str, figures: dict[str, float]) -> None:
    print(f"{name}: {json.dumps({k: round(v, 3) for k, v in figures.items()})}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
