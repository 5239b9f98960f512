"""Distributed Brains (issue 8): Brains killed mid-tool and mid-model-call, and how many
sessions one Brain process holds — the whole system as processes (``bench.rig``).

* ``mid-tool``: a one-call task whose tool runs sandboxed on the Hands (Docker); time
  from the dispatch (the intent commit) to the result's apply commit, with and without
  a SIGKILL of the dispatching Brain right after it published the dispatch (crash point
  ``relay:published:tools.dispatch.<tool>#1``), interleaved one-for-one. A second Brain
  is started as the first dispatches; the scheduler turns the result into a wake.
  Twice: the ``sleep`` tool running longer than the lease TTL, and the no-op ``echo``.
* ``mid-model``: an agent session whose scripted model answers after 1 s; the Brain
  holding it is SIGKILLed once its request reached the model server, a second Brain
  runs. Time from the kill to the session's next model request, against the lease TTL,
  for each reconciler period given (one system per period, run one after the other;
  each round starts at a random point of the period).
* ``concurrency``: one Brain process (``--concurrency 100``), the scripted model
  answering after 2 s: 100 one-round sessions woken at once (wall time, most requests in
  flight at the model server at once); then throughput with 1 and 2 such Brains, rounds
  alternating.

Needs Docker (``bh dev up --require docker``) and the tool images (``bh images build``);
Redis and NATS are the benchmark's own (``bench.rig.infrastructure``)::

    python -m bench.distributed --repeats 5 --out bench/results/distributed.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.rig import (
    Infrastructure,
    Rig,
    brain_argv,
    hands_argv,
    infrastructure,
    rig,
    scheduler_argv,
)
from bench.stats import median
from contracts import CommitRecord

SLOTS = 8
TOOL_CASES = ("sleep", "echo")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="mid-tool,mid-model,concurrency")
    parser.add_argument("--lease-seconds", type=float, default=2.0)
    parser.add_argument("--tool-seconds", type=float, default=3.0)
    parser.add_argument("--reconcile", default="0.2,2,30", help="reconciler periods, s")
    parser.add_argument("--sessions", type=int, default=400, help="per throughput round")
    parser.add_argument("--out", default="bench/results/distributed.json")
    args = parser.parse_args()
    only = set(args.only.split(","))
    report: dict[str, Any] = {"repeats": args.repeats, "lease_seconds": args.lease_seconds}
    async with infrastructure() as infra:
        if "mid-tool" in only:
            report["mid_tool"] = await mid_tool(
                infra, args.repeats, args.lease_seconds, args.tool_seconds
            )
            _say("mid_tool", report["mid_tool"])
            await _save(args.out, report)
        if "mid-model" in only:
            periods = [float(p) for p in args.reconcile.split(",")]
            report["mid_model"] = {
                str(period): await mid_model(infra, args.repeats, args.lease_seconds, period)
                for period in periods
            }
            _say("mid_model", report["mid_model"])
            await _save(args.out, report)
        if "concurrency" in only:
            report["concurrency"] = await concurrency(infra, args.repeats, args.sessions)
            _say("concurrency", report["concurrency"])
            await _save(args.out, report)


# -- 1. Brain killed mid-tool ------------------------------------------------------------


async def mid_tool(
    infra: Infrastructure, repeats: int, ttl: float, tool_seconds: float
) -> dict[str, Any]:
    brain = brain_argv(lease_seconds=ttl, concurrency=SLOTS, sandboxed=TOOL_CASES)
    processes = {
        "scheduler": scheduler_argv(),
        "hands": hands_argv(),
        "brain-a": brain,
        "brain-b": brain,
    }
    tasks: dict[str, dict[str, Any]] = {
        "sleep": {"tool": "sleep", "args": {"seconds": tool_seconds}},
        "echo": {"tool": "echo", "args": {"message": "hi"}},
    }
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        case: {"plain": [], "killed": []} for case in TOOL_CASES
    }
    async with rig(
        processes, infra=infra, start=["scheduler", "hands"], tools=TOOL_CASES
    ) as system:
        number = 0
        for round_ in range(repeats + 1):  # round 0 warms up
            for case in TOOL_CASES:
                for kill in _alternating(round_):
                    number += 1
                    sample = await _tool_round(system, f"t{number}", tasks[case], kill=kill)
                    if round_:
                        samples[case]["killed" if kill else "plain"].append(sample)
    return {case: _tool_summary(samples[case], ttl, tasks[case]["args"]) for case in TOOL_CASES}


async def _tool_round(
    system: Rig, session_id: str, task: dict[str, Any], *, kill: bool
) -> dict[str, float]:
    crash = {"BH_CRASH_AT": f"relay:published:tools.dispatch.{task['tool']}#1"} if kill else {}
    system.fleet.start("brain-a", **crash)
    await system.until_ready("brain-a")
    await system.submit(session_id, {"task": {"kind": "one-call", "input": task}})
    system.fleet.start("brain-b")  # up while the tool runs (brain-a took the wake)
    await system.until_answered([session_id], within=120)
    killed = system.fleet.processes["brain-a"].poll() == -9
    if killed != kill:
        raise RuntimeError(f"{session_id}: brain-a killed={killed}, expected {kill}")
    await system.stop("brain-a", "brain-b")
    records = await system.records(session_id)
    dispatched = next(r for r in records if _dispatches(r))
    applied = next(r for r in records if r.commit.applied_operations)
    result = await system.store.get_operation_result(applied.commit.applied_operations[0])
    assert result is not None and result.started_at is not None
    start = dispatched.committed_at.timestamp()
    return {
        "dispatch_to_applied": applied.committed_at.timestamp() - start,
        "container_started": result.started_at.timestamp() - start,
        "result_written": result.finished_at.timestamp() - start,
        "claims": sum(1 for r in records if r.claim),
    }


def _dispatches(record: CommitRecord) -> bool:
    return any(m.topic.startswith("tools.dispatch.") for m in record.commit.outbox)


def _tool_summary(
    samples: dict[str, list[dict[str, float]]], ttl: float, args: dict[str, Any]
) -> dict[str, Any]:
    plain, killed = samples["plain"], samples["killed"]

    def med(rows: list[dict[str, float]], key: str) -> float:
        return median([row[key] for row in rows])

    plain_s, killed_s = med(plain, "dispatch_to_applied"), med(killed, "dispatch_to_applied")
    return {
        "args": args,
        "lease_seconds": ttl,
        "plain_s": plain_s,
        "killed_s": killed_s,
        "difference_s": killed_s - plain_s,
        "ratio": killed_s / plain_s,
        "plain_result_written_s": med(plain, "result_written"),
        "killed_result_written_s": med(killed, "result_written"),
        "plain_written_to_applied_s": median(
            [r["dispatch_to_applied"] - r["result_written"] for r in plain]
        ),
        "killed_written_to_applied_s": median(
            [r["dispatch_to_applied"] - r["result_written"] for r in killed]
        ),
        "samples": samples,
    }


# -- 2. Brain killed mid-model-call --------------------------------------------------------


async def mid_model(
    infra: Infrastructure, repeats: int, ttl: float, reconcile: float
) -> dict[str, Any]:
    brain = brain_argv(lease_seconds=ttl, concurrency=SLOTS)
    processes = {
        "scheduler": scheduler_argv(reconcile_seconds=reconcile),
        "brain-a": brain,
        "brain-b": brain,
    }
    model = {"model": "scripted", "turns": [{"content": "done", "delay_seconds": 1.0}]}
    samples = []
    # rounds would otherwise lock onto the reconciler's phase (each ends just after a
    # pass): start each at a random point of its period
    rng = random.Random(reconcile)
    async with rig(processes, infra=infra, start=["scheduler"], model=model) as system:
        for round_ in range(repeats + 1):
            await asyncio.sleep(rng.uniform(0, reconcile))
            sample = await _model_round(system, f"m{round_}")
            if round_:
                samples.append(sample)
    resumes = [s["kill_to_next_request"] for s in samples]
    resume = median(resumes)
    return {
        "lease_seconds": ttl,
        "reconcile_seconds": reconcile,
        "kill_to_next_request_s": resume,
        "kill_to_next_request_min_max_s": [min(resumes), max(resumes)],
        "lease_left_at_kill_s": median([s["lease_left"] for s in samples]),
        "lapse_to_claim_s": median([s["kill_to_claim"] - s["lease_left"] for s in samples]),
        "kill_to_claim_s": median([s["kill_to_claim"] for s in samples]),
        "over_ttl_s": resume - ttl,
        "target_met": resume <= ttl + 0.2,
        "samples": samples,
    }


async def _model_round(system: Rig, session_id: str) -> dict[str, float]:
    for name in ("brain-a", "brain-b"):
        process = system.fleet.processes.get(name)
        if process is None or process.poll() is not None:
            system.fleet.start(name)
    for name in ("brain-a", "brain-b"):
        await system.until_ready(name)
    tag = f"bench session {session_id}"
    await system.submit(session_id, {"text": tag})
    await _until_requests(system, tag, 1)
    holder = await system.leases.holder(session_id)
    victim = system.name_of(holder or "")
    if victim is None:
        raise RuntimeError(f"{session_id}: no live Brain holds it ({holder})")
    lease_left = await system.lease_left(session_id)
    killed_at = time.time()
    system.fleet.kill(victim)
    requests = await _until_requests(system, tag, 2)
    await system.until_answered([session_id], within=120)
    claims = [r for r in await system.records(session_id) if r.claim and r.holder != holder]
    return {
        "lease_left": lease_left,
        "kill_to_next_request": requests[1]["arrived"] - killed_at,
        "kill_to_claim": claims[0].committed_at.timestamp() - killed_at,
    }


async def _until_requests(system: Rig, tag: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen = [r for r in (await system.probe())["requests"] if r["tag"] == tag]
        if len(seen) >= count:
            return sorted(seen, key=lambda r: float(r["arrived"]))
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{tag}: fewer than {count} model requests")


# -- 3. Concurrency ----------------------------------------------------------------------


async def concurrency(infra: Infrastructure, repeats: int, sessions: int) -> dict[str, Any]:
    slots = 100
    brain = brain_argv(concurrency=slots)
    processes = {"brain-1": brain, "brain-2": brain}
    model = {"model": "scripted", "turns": [{"content": "done", "delay_seconds": 2.0}]}
    held: list[dict[str, float]] = []
    rates: dict[str, list[float]] = {"1": [], "2": []}
    async with rig(processes, infra=infra, start=["brain-1"], model=model) as system:
        await system.until_ready("brain-1")
        batch = 0
        for round_ in range(repeats + 1):
            batch += 1
            sample = await _batch(system, f"h{batch}", 100)
            if round_:
                held.append(sample)
            for two in _alternating(round_):
                if two:
                    system.fleet.start("brain-2")
                    await system.until_ready("brain-2")
                batch += 1
                sample = await _batch(system, f"b{batch}", sessions)
                if two:
                    await system.stop("brain-2")
                if round_:
                    rates["2" if two else "1"].append(sessions / sample["wall"] * 60)
    return {
        "slots": slots,
        "model_delay_s": 2.0,
        "hold_100_wall_s": median([s["wall"] for s in held]),
        "hold_100_peak_in_flight": median([s["peak"] for s in held]),
        "hold_100_samples": held,
        "sessions_per_round": sessions,
        "per_minute_1_brain": median(rates["1"]),
        "per_minute_2_brains": median(rates["2"]),
        "scaling": median(rates["2"]) / median(rates["1"]),
        "rates": rates,
    }


async def _batch(system: Rig, prefix: str, count: int) -> dict[str, float]:
    """Submit ``count`` one-round sessions, wake them at once; wall time from the first
    wake to the last answer commit, and the model server's peak of requests in flight."""
    names = [f"{prefix}-{n}" for n in range(count)]
    for name in names:
        await system.submit(name, {"text": f"bench session {name}"}, wake=False)
    await system.probe(reset=True)
    started = time.time()
    await system.wake_all(names)
    answered = await system.until_answered(names, within=300, every=0.5)
    probe = await system.probe()
    return {"wall": max(answered.values()) - started, "peak": float(probe["peak"])}


async def _save(out: str, report: dict[str, Any]) -> None:
    """Write what is measured so far (a later benchmark's failure loses nothing)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(path.write_text, json.dumps(report, indent=2) + "\n")


def _alternating(round_: int) -> Iterator[bool]:
    """False then True on even rounds, True then False on odd ones."""
    yield from (False, True) if round_ % 2 == 0 else (True, False)


def _say(name: str, figures: object) -> None:
    def brief(value: object) -> object:
        if isinstance(value, dict):
            return {k: brief(v) for k, v in value.items() if "samples" not in k}
        return round(value, 4) if isinstance(value, float) else value

    print(f"{name}: {json.dumps(brief(figures), indent=1)}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
