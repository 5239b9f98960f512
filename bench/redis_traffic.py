"""Redis traffic of the wake path (issue 17, goal 2): commands per tool call, and per
second when nothing is submitted — the whole system as processes (``bench.rig``).

* ``idle``: a Brain (8 wake slots), the scheduler and a Hands running, nothing
  submitted: Redis commands per second (``INFO commandstats``, the benchmark's own
  ``INFO`` calls left out) over windows of ``--window`` seconds, first with everything
  running, then with the scheduler stopped (the Hands hold no Redis connection, so that
  is the Brain alone; the scheduler's share is the difference); and the idle Brain's CPU
  (user + system time from ``/proc``, as a share of one core).
* ``tool call``: one-call sessions whose no-op ``echo`` runs sandboxed on the Hands,
  one after another: the commands Redis served from the submission's wake to the
  answer, per call, raw and with the idle rate over the same time taken off, and which
  commands they were.

Every figure is the median over ``--repeats`` windows or calls. Needs Docker (``bh dev up
--require docker``) and the tool images (``bh images build``)::

    python -m bench.redis_traffic --repeats 7 --out bench/results/redis_traffic.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio
from pydantic import JsonValue

from bench.rig import Rig, brain_argv, hands_argv, infrastructure, rig, scheduler_argv
from bench.stats import median

SLOTS = 8
_TICKS = os.sysconf("SC_CLK_TCK")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--window", type=float, default=5.0, help="idle window, s")
    parser.add_argument("--out", default="bench/results/redis_traffic.json")
    args = parser.parse_args()
    processes = {
        "scheduler": scheduler_argv(),
        "hands": hands_argv(),
        "brain": brain_argv(concurrency=SLOTS, sandboxed=("echo",)),
    }
    report: dict[str, Any] = {"repeats": args.repeats, "slots": SLOTS, "load": _load()}
    async with (
        infrastructure() as infra,
        rig(
            processes, infra=infra, start=["scheduler", "hands", "brain"], tools=("echo",)
        ) as system,
    ):
        await system.until_ready("brain")
        report["tool_call"] = await _tool_calls(system, args.repeats)
        _say("tool call", report["tool_call"])
        report["idle"] = await _idle(system, args.repeats, args.window)
        _say("idle", report["idle"])
    report["load_after"] = _load()
    _save(Path(args.out), report)


async def _idle(system: Rig, repeats: int, window: float) -> dict[str, Any]:
    await asyncio.sleep(window)  # the tool calls' tail (leases released, timers) settles
    brain = system.fleet.processes["brain"].pid
    everything, alone, cpu = [], [], []
    for _ in range(repeats):
        everything.append(await _rate(system.redis, window))
    all_names = await _names(system.redis, window)
    await system.stop("scheduler")
    await asyncio.sleep(1)
    for _ in range(repeats):
        started, ticks = time.monotonic(), _cpu_ticks(brain)
        alone.append(await _rate(system.redis, window))
        cpu.append((_cpu_ticks(brain) - ticks) / _TICKS / (time.monotonic() - started))
    return {
        "commands_per_s": median(everything),
        "brain_commands_per_s": median(alone),
        "scheduler_commands_per_s": median(everything) - median(alone),
        "brain_cpu_share": median(cpu),
        "commands_by_name_per_s": all_names,
        "brain_commands_by_name_per_s": await _names(system.redis, window),
    }


async def _rate(client: redis.asyncio.Redis, window: float) -> float:
    before = await _commands(client)
    started = time.monotonic()
    await asyncio.sleep(window)
    after = await _commands(client)
    return sum((after - before).values()) / (time.monotonic() - started)


async def _names(client: redis.asyncio.Redis, window: float) -> dict[str, float]:
    before = await _commands(client)
    await asyncio.sleep(window)
    diff = await _commands(client) - before
    return {name: round(count / window, 2) for name, count in diff.most_common()}


async def _tool_calls(system: Rig, repeats: int) -> dict[str, Any]:
    idle = await _rate(system.redis, 3.0)
    raw, net, wall = [], [], []
    names: Counter[str] = Counter()
    call: dict[str, JsonValue] = {"tool": "echo", "args": {"message": "hi"}}
    task: dict[str, JsonValue] = {"task": {"kind": "one-call", "input": call}}
    for number in range(repeats + 1):  # call 0 warms up (image, egress network, pool)
        session_id = f"call{number}"
        before = await _commands(system.redis)
        started = time.monotonic()
        await system.submit(session_id, task)
        await system.until_answered([session_id], within=120, every=0.02)
        await asyncio.sleep(0.5)  # the answer's release and the last wake's bookkeeping
        elapsed = time.monotonic() - started
        diff = await _commands(system.redis) - before
        if number:
            count = sum(diff.values())
            raw.append(count)
            net.append(count - idle * elapsed)
            wall.append(elapsed)
            names.update(diff)
    return {
        "commands_per_call": median(raw),
        "commands_per_call_less_idle": median(net),
        "idle_rate_during": idle,
        "seconds_per_call_with_settle": median(wall),
        "commands_by_name_per_call": {
            name: round(count / repeats, 1) for name, count in names.most_common()
        },
    }


async def _commands(client: redis.asyncio.Redis) -> Counter[str]:
    """Calls per command so far, the ``INFO`` that asks left out."""
    stats = await client.info("commandstats")
    counts: Counter[str] = Counter()
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name != "info":
            counts[name] = int(value["calls"])
    return counts


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def _save(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))


def _load() -> list[float]:
    return list(os.getloadavg())


def _say(name: str, figures: dict[str, Any]) -> None:
    shown = {k: v for k, v in figures.items() if not isinstance(v, dict)}
    print(f"{name}: {json.dumps(shown)}")
    for key, value in figures.items():
        if isinstance(value, dict):
            top = dict(list(value.items())[:12])
            print(f"  {key}: {json.dumps(top)}")


if __name__ == "__main__":
    asyncio.run(main())
