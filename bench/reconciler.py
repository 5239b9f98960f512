"""The scheduler's two store passes with many idle sessions (issue 17, goal 4).

A store (SQLite) holds ``--idle`` sessions that need nothing — each one's task waits for
a person's answer — beside ``--due`` sessions that need attention: a submission nobody
woke a Brain for (what a Session API that died between its commit and its wake leaves)
and, in the attention set, a session waiting on a Hands. Measured, on the benchmark's
own Redis, medians over ``--repeats``:

* the **attention pass** (``Scheduler.attend``: the due members of the attention set,
  every 5 s): its time, with the idle sessions in the store and, as the same-run
  baseline, in a store with the due sessions only;
* the **periodic audit** (``Scheduler.reconcile(full=False)``, every 10 min: the active
  sessions but those a Brain marked quiet, and this period's slice of the quiet ones —
  one in ``quiet_slices``, 12): its time, the store calls it made and the wakes it asked
  for, with and without the idle sessions;
* the **full audit** (on start and when Redis lost data: every active session).

A pass proportional to the sessions that need attention costs the same with or without
the idle ones (ratio ~1)::

    python -m bench.reconciler --idle 10000 --due 10 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.rig import infrastructure
from bench.stats import median
from brain.context import PhaseContext
from brain.outcome import Done, PhaseOutcome, Wait
from brain.registry import Registry, TaskKind
from brain.runner import SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher
from contracts import utcnow
from contracts.question import Question
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.wakes import RQWakes
from runtime.crashpoints import CrashPoints
from scheduler.service import Scheduler, SchedulerSettings
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient

#: sessions set up at once
_AT_ONCE = 32


def _registry() -> Registry:
    async def ask(ctx: PhaseContext) -> PhaseOutcome:
        return Wait(question=Question(id="go", prompt="Go on?"), next_phase="done")

    async def done(ctx: PhaseContext) -> PhaseOutcome:
        return Done(result="done")

    registry = Registry()
    registry.add(TaskKind("idle", 1, {"start": ask, "done": done}))
    return registry


async def _idle_sessions(store: SessionStore, count: int) -> None:
    """``count`` sessions, each driven until its task waits for a person's answer."""
    services = Services(
        store=store, tools=LocalDispatcher(), crash=CrashPoints(), clock=utcnow, runner_id="setup"
    )
    runner = SessionRunner(store, _registry(), services)
    client = SessionClient(store)
    gate = asyncio.Semaphore(_AT_ONCE)

    async def one(n: int) -> None:
        async with gate:
            session_id = f"idle-{n:06d}"
            await client.submit(session_id, "r1", {"task": {"kind": "idle"}})
            report = await runner.drive(session_id)
            assert report.quiet, "its task waits for an answer"
            await store.index.quiet(session_id, seq=report.seq)  # as the Brain service does

    await asyncio.gather(*(one(n) for n in range(count)))


async def _due_sessions(store: SessionStore, count: int) -> list[str]:
    """Sessions that need a drive: a submission with no wake, also in the attention set."""
    names = [f"due-{n:04d}-{uuid.uuid4().hex[:4]}" for n in range(count)]
    for session_id in names:
        await SessionClient(store).submit(session_id, "r1", {"task": {"kind": "idle"}})
    return names


class _Counted:
    """Counts the store backend's calls by method while ``counting``."""

    def __init__(self, store: SessionStore) -> None:
        self.calls: Counter[str] = Counter()
        backend = store.backend
        for name in ("get", "items", "keys", "last", "put", "create", "delete"):
            method = getattr(backend, name)
            setattr(backend, name, self._wrap(name, method))

    def _wrap(self, name: str, method: Callable[..., Awaitable[Any]]) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted


async def _passes(store: SessionStore, redis_url: str, due: int, repeats: int) -> dict[str, float]:
    counted = _Counted(store)
    prefix = f"br{uuid.uuid4().hex[:8]}"
    client = redis_client.connect(redis_url)
    wakes = RQWakes(redis_url, prefix=prefix)
    settings = SchedulerSettings(reconcile_every=None, attend_every=None, beat_every=None)
    scheduler = Scheduler(
        store=store,
        bus=None,
        wakes=wakes,
        leases=RedisLeases(client, prefix=prefix),
        settings=settings,
    )
    names = await _due_sessions(store, due)
    attend, audit, reads, woken, full = [], [], [], [], []
    try:
        for _ in range(repeats):
            for session_id in names:
                await wakes.attention.watch(session_id, after=timedelta(0))
            started = time.perf_counter()
            await scheduler.attend()
            attend.append(time.perf_counter() - started)
            await asyncio.to_thread(wakes._sync.flushdb)  # no wake left pending: all again
            counted.calls.clear()
            started = time.perf_counter()
            found = await scheduler.reconcile(full=False)
            audit.append(time.perf_counter() - started)
            reads.append(float(sum(counted.calls.values())))
            woken.append(float(len(found)))
            await asyncio.to_thread(wakes._sync.flushdb)
            started = time.perf_counter()
            await scheduler.reconcile(full=True)
            full.append(time.perf_counter() - started)
            await asyncio.to_thread(wakes._sync.flushdb)
    finally:
        wakes.close()
        await client.aclose()
    return {
        "attend_ms": median(attend) * 1000,
        "audit_ms": median(audit) * 1000,
        "audit_store_calls": median(reads),
        "audit_wakes": median(woken),
        "full_audit_ms": median(full) * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/reconciler.json")
    args = parser.parse_args()
    report: dict[str, Any] = {"idle": args.idle, "due": args.due, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        async with infrastructure() as infra:
            alone = await open_store(f"sqlite:///{work}/due-only.db")
            crowded = await open_store(f"sqlite:///{work}/with-idle.db")
            started = time.perf_counter()
            await _idle_sessions(crowded, args.idle)
            report["setup_s"] = time.perf_counter() - started
            report["due_only"] = await _passes(alone, infra.redis_url, args.due, args.repeats)
            report["with_idle"] = await _passes(crowded, infra.redis_url, args.due, args.repeats)
            await alone.close()
            await crowded.close()
    for key in ("attend_ms", "audit_ms", "audit_store_calls", "audit_wakes", "full_audit_ms"):
        base = report["due_only"][key]
        report[f"{key}_ratio"] = report["with_idle"][key] / base if base else None
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    await asyncio.to_thread(_save, Path(args.out), report)


def _save(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
