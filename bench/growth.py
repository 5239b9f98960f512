"""Growth: what a load reads and what the store holds as a session's history grows.

    python -m bench.growth --sizes 100,1000,10000 --output-bytes 8192 --every 50

A session of agent-shaped work on the SQLite store, driven by the kernel (one Brain,
one holder): every submission runs one task whose phase performs one tool operation
with an ``--output-bytes`` output and records it as a tool-result entry; the outcome
commit carries the entry, the applied mark, the task's terminal state and the
submission's answer. Baselines every ``--every`` commits (K).

At each size (in commits) it reports, for a fresh load right after a baseline and again
half a baseline interval later (with a tail of K/2 commits to replay): the calls made
and bytes read (deterministic) and the median load time over ``--repeats``; for the
store: the bytes it holds in all, per commit, and in blobs, and how many blobs no record
refers to.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import median
from brain.registry import Registry
from brain.runner import SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher
from contracts import utcnow
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.backends import Counting
from tests.support.workloads import install_report


def workload(output_bytes: int) -> tuple[Registry, LocalDispatcher]:
    registry, tools = Registry(), LocalDispatcher()
    install_report(registry, tools, output_bytes)
    return registry, tools


async def fresh_load(store: SessionStore, repeats: int) -> dict[str, float]:
    counting = Counting(store.backend)
    reader = SessionStore(counting, store.settings.model_copy(update={"read_only": True}))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await reader.session("s1")
        samples.append(time.perf_counter() - started)
    return {
        "calls": counting.calls / repeats,
        "bytes": counting.bytes_read / repeats,
        "seconds": median(samples),
    }


def storage(db: Path) -> dict[str, float]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT partition, item, value FROM kv").fetchall()
    total = sum(len(p) + len(i) + len(v) for p, i, v in rows)
    blob_rows = [(p, v) for p, _, v in rows if p.startswith("blob/")]
    text = b" ".join(v for p, _, v in rows if not p.startswith("blob/")).decode(errors="ignore")
    reachable = set(re.findall(r'"digest":"([0-9a-f]{64})"', text))
    blobs = {p.removeprefix("blob/") for p, _ in blob_rows}
    return {
        "bytes": total,
        "blob_bytes": sum(len(v) for _, v in blob_rows),
        "blobs": len(blobs),
        "unreachable_blobs": len(blobs - reachable),
    }


async def grow(workdir: Path, sizes: list[int], every: int, output: int, repeats: int) -> Any:
    db = workdir / "growth.db"
    store = await open_store(f"sqlite:///{db}", baseline_every=every)
    registry, tools = workload(output)
    services = Services(
        store=store, tools=tools, crash=CrashPoints(), clock=utcnow, runner_id="brain-1"
    )
    runner = SessionRunner(store, registry, services)
    client = SessionClient(store)
    rows: dict[int, Any] = {}
    n = 0

    async def reach(size: int) -> int:
        nonlocal n
        while (await store.session("s1")).seq < size:
            await client.submit("s1", f"r{n}", {"task": {"kind": "report"}})
            await runner.drive("s1")
            n += 1
        await store.flush()
        return (await store.session("s1")).seq

    try:
        for size in sizes:
            seq = await reach(size)
            held = storage(db)
            after_baseline = await fresh_load(store, repeats)
            await reach(size + every // 2)
            rows[size] = {
                "seq": seq,
                "submissions": n,
                "load": after_baseline,
                "load_mid_window": await fresh_load(store, repeats),
                "store": held,
                "bytes_per_commit": held["bytes"] / seq,
            }
            print_row(size, rows[size])
    finally:
        await store.close()
    return rows


def print_row(size: int, row: Any) -> None:
    load, mid, held = row["load"], row["load_mid_window"], row["store"]
    print(
        f"{size:>6} commits (seq {row['seq']}): load {load['calls']:.0f} calls, "
        f"{load['bytes'] / 1024:.1f} KiB, {load['seconds'] * 1000:.2f} ms; mid-window "
        f"{mid['bytes'] / 1024:.1f} KiB, {mid['seconds'] * 1000:.2f} ms | store "
        f"{held['bytes'] / 2**20:.2f} MiB, "
        f"{row['bytes_per_commit'] / 1024:.1f} KiB/commit, blobs {held['blobs']} "
        f"({held['blob_bytes'] / 2**20:.2f} MiB), unreachable {held['unreachable_blobs']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--every", type=int, default=50, help="baseline interval K")
    parser.add_argument("--output-bytes", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/growth.json")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(grow(Path(tmp), sizes, args.every, args.output_bytes, args.repeats))
    first, last = rows[sizes[0]], rows[sizes[-1]]
    previous = rows[sizes[-2]] if len(sizes) > 1 else first
    before = sizes[-2] if len(sizes) > 1 else sizes[0]
    print(
        f"bytes read per load {sizes[-1]}:{before} = "
        f"{last['load']['bytes'] / previous['load']['bytes']:.2f} (mid-window "
        f"{last['load_mid_window']['bytes'] / previous['load_mid_window']['bytes']:.2f}); "
        f"bytes per commit {sizes[-1]}:{sizes[0]} = "
        f"{last['bytes_per_commit'] / first['bytes_per_commit']:.2f}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"sizes": rows, "every": args.every}, indent=2))


if __name__ == "__main__":
    main()
