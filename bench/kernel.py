"""Durable phase overhead: a task of 100 trivial phases on the SQLite store, against DBOS
(SQLite system database) running a workflow of 100 trivial steps, in the same run.

    python -m bench.kernel --repeats 7

Both record every step durably before the next starts: brainhands commits each phase
outcome (one create-once INSERT, WAL, ``synchronous=FULL``); DBOS checkpoints each step's
output in its system database (SQLite with its defaults: rollback journal,
``synchronous=FULL``). Per-phase time is the whole run divided by the number of phases,
so each side's fixed costs (claim and submission bookkeeping; workflow status rows) are
included. Rounds alternate between the two; figures are medians over rounds.

The floor, measured in the same run and interleaved with both: one raw SQLite commit
with fsync per phase (a plain autocommit ``INSERT`` of a phase-sized record on a WAL
database with ``synchronous=FULL``, the store's own settings). ``--no-dbos`` leaves DBOS
out (it is an optional dependency).

Two more figures say where a phase's time above the floor goes, also interleaved: the
same chain with the store's fsync turned off (``synchronous=OFF``: the CPU time of a
phase, Python and SQLite), and the floor with that much CPU work (a busy wait) before
each commit — what one fsynced commit costs on this disk when it does not follow the
previous one at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.stats import median
from brain.context import PhaseContext
from brain.outcome import Done, Next, PhaseOutcome
from brain.registry import Registry, TaskKind
from brain.runner import SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher
from contracts import utcnow
from runtime.crashpoints import CrashPoints
from session_store import open_store
from session_store.submissions import SessionClient


def chain_kind(phases: int) -> TaskKind:
    async def step(ctx: PhaseContext) -> PhaseOutcome:
        index = 0 if ctx.task.phase == "start" else int(ctx.task.phase.removeprefix("p"))
        return Done(result=index) if index == phases - 1 else Next(phase=f"p{index + 1}")

    handlers = {"start": step, **{f"p{index}": step for index in range(1, phases)}}
    return TaskKind("chain", 1, handlers)


async def brainhands_round(workdir: Path, phases: int, *, fsync: bool = True) -> float:
    """Seconds per phase of a chain of ``phases``; without ``fsync``, the store's SQLite
    does not wait for the disk (``synchronous=OFF``): a phase's CPU time alone."""
    store = await open_store(f"sqlite:///{workdir}/bh-{uuid.uuid4().hex[:8]}.db")
    if not fsync:  # the benchmark's own look under the backend: nothing else does this
        backend: Any = store.backend
        for connection in (backend._inline, backend._waiting):
            connection.execute("PRAGMA synchronous = OFF")
    registry = Registry()
    registry.add(chain_kind(phases))
    services = Services(
        store=store, tools=LocalDispatcher(), crash=CrashPoints(), clock=utcnow, runner_id="bench"
    )
    runner = SessionRunner(store, registry, services)
    await SessionClient(store).submit("s", "r", {"task": {"kind": "chain"}})
    started = time.perf_counter()
    report = await runner.drive("s")
    elapsed = time.perf_counter() - started
    assert report.phases == phases and not report.active
    await store.close()
    return elapsed / phases


def floor_round(workdir: Path, phases: int, record: bytes, gap: float = 0.0) -> float:
    """One raw fsynced SQLite commit per phase: the floor a durable phase stands on;
    with ``gap``, that many seconds of CPU work (a busy wait) before each commit."""
    db = sqlite3.connect(workdir / f"floor-{uuid.uuid4().hex[:8]}.db", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE kv (p TEXT, i TEXT, v BLOB, PRIMARY KEY (p, i)) WITHOUT ROWID")
        started = time.perf_counter()
        for index in range(phases):
            if gap:
                until = time.perf_counter() + gap
                while time.perf_counter() < until:
                    pass
            db.execute("INSERT INTO kv VALUES ('log', ?, ?)", (f"{index:016d}", record))
        return (time.perf_counter() - started) / phases
    finally:
        db.close()


def dbos_setup(workdir: Path, phases: int) -> Any:
    from dbos import DBOS, DBOSConfig

    @DBOS.step()
    def trivial(index: int) -> int:
        return index

    @DBOS.workflow()
    def chain() -> int:
        total = 0
        for index in range(phases):
            total += trivial(index)
        return total

    config: DBOSConfig = {
        "name": "bench-chain",
        "system_database_url": f"sqlite:///{workdir}/dbos.sqlite",
        "run_admin_server": False,
    }
    DBOS(config=config)
    DBOS.launch()
    return chain


def dbos_round(chain: Any, phases: int) -> float:
    from dbos import DBOS, SetWorkflowID

    started = time.perf_counter()
    with SetWorkflowID(uuid.uuid4().hex):
        chain()
    elapsed = time.perf_counter() - started
    del DBOS
    return elapsed / phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--phases", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-dbos", action="store_true", help="leave DBOS out")
    parser.add_argument("--out", default="bench/results/kernel.json")
    args = parser.parse_args()
    record = b"x" * 700  # about one phase's commit record
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        chain = None if args.no_dbos else dbos_setup(workdir, args.phases)
        if chain is not None:
            dbos_round(chain, args.phases)  # warm up every side once
        asyncio.run(brainhands_round(workdir, args.phases))
        floor_round(workdir, args.phases, record)
        ours, theirs, floors, cpu, gapped = [], [], [], [], []
        for _ in range(args.repeats):
            floors.append(floor_round(workdir, args.phases, record))
            ours.append(asyncio.run(brainhands_round(workdir, args.phases)))
            cpu.append(asyncio.run(brainhands_round(workdir, args.phases, fsync=False)))
            gapped.append(floor_round(workdir, args.phases, record, gap=cpu[-1]))
            if chain is not None:
                theirs.append(dbos_round(chain, args.phases))
        report: dict[str, Any] = {
            "phases": args.phases,
            "brainhands_per_phase_ms": median(ours) * 1000,
            "floor_per_commit_ms": median(floors) * 1000,
            "ratio_to_floor": median([a / b for a, b in zip(ours, floors, strict=True)]),
            "cpu_per_phase_ms": median(cpu) * 1000,
            "floor_after_that_cpu_ms": median(gapped) * 1000,
            "ratio_to_floor_after_cpu": median([a / b for a, b in zip(ours, gapped, strict=True)]),
            "load": list(os.getloadavg()),
        }
        if theirs:
            report["dbos_per_step_ms"] = median(theirs) * 1000
            report["ratio"] = median([a / b for a, b in zip(ours, theirs, strict=True)])
    shown = (
        f"brainhands {report['brainhands_per_phase_ms']:.3f} ms/phase | floor "
        f"{report['floor_per_commit_ms']:.3f} ms/commit | {report['ratio_to_floor']:.2f}x floor"
        f" | CPU {report['cpu_per_phase_ms']:.3f} ms/phase | floor after that CPU "
        f"{report['floor_after_that_cpu_ms']:.3f} ms | "
        f"{report['ratio_to_floor_after_cpu']:.2f}x that"
    )
    if theirs:
        shown += f" | DBOS {report['dbos_per_step_ms']:.3f} ms/step | {report['ratio']:.2f}x DBOS"
    print(shown)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
