"""Session Store benchmarks: commit latency against each backend's raw floor, and load
time as history grows.

    python -m bench.store --backends sqlite,s3,dynamodb

S3 and DynamoDB run against the API server at ``BH_AWS_ENDPOINT_URL`` (``bh dev up``).
Raw floors, measured in the same run and interleaved one-for-one with store commits:
SQLite — one plain autocommit INSERT of the same bytes on a WAL database with
``synchronous=FULL``; S3 — one ``PutObject(IfNoneMatch="*")``; DynamoDB — one conditional
``PutItem``. Every figure is the median over ``--repeats`` rounds.
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
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from bench.stats import median, ms, percentile
from contracts import Commit, CommitRecord
from session_store import SessionStore, StoreSettings, open_backend, open_store
from session_store.backends.aws import open_client
from session_store.clock import ServerClock
from tests.support.backends import Counting
from tests.support.builders import small_commit

Raw = Callable[[bytes], Awaitable[None]]


def location(kind: str, workdir: Path) -> str:
    endpoint = os.environ.get("BH_AWS_ENDPOINT_URL", "http://127.0.0.1:15000")
    token = uuid.uuid4().hex[:10]
    if kind == "sqlite":
        return f"sqlite:///{workdir}/bench-{token}.db"
    if kind == "s3":
        return f"s3://bh-bench/{token}?endpoint_url={endpoint}"
    return f"dynamodb://bh-bench-{token}?endpoint_url={endpoint}"


async def raw_floor(kind: str, workdir: Path, stack: AsyncExitStack) -> Raw:
    """A function doing the backend's bare create-once write, nothing else."""
    counter = iter(range(10**9))
    run = uuid.uuid4().hex[:8]
    endpoint = os.environ.get("BH_AWS_ENDPOINT_URL", "http://127.0.0.1:15000")
    if kind == "sqlite":
        db = sqlite3.connect(workdir / "raw.db", isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE kv (p TEXT, i TEXT, v BLOB, PRIMARY KEY (p, i)) WITHOUT ROWID")
        stack.callback(db.close)

        async def sqlite_raw(data: bytes) -> None:
            db.execute("INSERT INTO kv VALUES ('raw', ?, ?)", (f"{next(counter):016d}", data))

        return sqlite_raw
    if kind == "s3":
        s3 = await open_client("s3", stack, endpoint_url=endpoint, region=None, clock=ServerClock())

        async def s3_raw(data: bytes) -> None:
            key = f"raw-{run}/{next(counter):016d}"
            await s3.put_object(Bucket="bh-bench", Key=key, Body=data, IfNoneMatch="*")

        return s3_raw
    table = f"bh-bench-raw-{uuid.uuid4().hex[:8]}"
    backend = await open_backend(f"dynamodb://{table}?endpoint_url={endpoint}", create=True)
    stack.push_async_callback(backend.close)
    dynamo = await open_client(
        "dynamodb", stack, endpoint_url=endpoint, region=None, clock=ServerClock()
    )

    async def dynamo_raw(data: bytes) -> None:
        await dynamo.put_item(
            TableName=table,
            Item={"pk": {"S": "raw"}, "sk": {"S": f"{next(counter):016d}"}, "v": {"B": data}},
            ConditionExpression="attribute_not_exists(pk)",
        )

    return dynamo_raw


async def commit_latency(kind: str, workdir: Path, commits: int, repeats: int) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        store = await open_store(location(kind, workdir), create=True)
        stack.push_async_callback(store.close)
        raw = await raw_floor(kind, workdir, stack)
        handle = await store.session("bench")
        commit, current = small_commit(0)
        await handle.commit(commit, fence=1)
        sample = _record_bytes(commit)
        rounds = []
        for _ in range(repeats):
            ours, floor = [], []
            for n in range(commits):
                commit, current = small_commit(n, current)
                started = time.perf_counter()
                await raw(sample)
                floor.append(time.perf_counter() - started)
                started = time.perf_counter()
                await handle.commit(commit, fence=1)
                ours.append(time.perf_counter() - started)
            rounds.append(
                {
                    "p50": percentile(ours, 0.5),
                    "p99": percentile(ours, 0.99),
                    "raw_p50": percentile(floor, 0.5),
                    "raw_p99": percentile(floor, 0.99),
                }
            )
        result = {key: median([r[key] for r in rounds]) for key in rounds[0]}
        result["ratio_p50"] = median([r["p50"] / r["raw_p50"] for r in rounds])
        result["record_bytes"] = len(sample)
        return result


async def load_times(
    kind: str, workdir: Path, sizes: list[int], repeats: int, every: int
) -> dict[int, dict[str, float]]:
    url = location(kind, workdir)
    writer = await open_store(url, create=True, baseline_every=every)
    counting = Counting(await open_backend(url, read_only=True))
    reader = SessionStore(counting, StoreSettings(read_only=True))
    handle = await writer.session("history")
    current = None
    times: dict[int, dict[str, float]] = {}
    try:
        for size in sizes:
            while handle.seq < size:
                commit, current = small_commit(handle.seq, current)
                await handle.commit(commit, fence=1)
            await writer.flush()
            counting.calls = counting.bytes_read = 0
            seconds = await _median_load(reader, "history", repeats)
            calls, read = counting.calls / repeats, counting.bytes_read / repeats
            times[size] = {
                "seconds": seconds,
                "calls": calls,
                "bytes": read,
                "empty_call": await _median_empty_call(counting, repeats),
            }
    finally:
        await writer.close()
        await reader.close()
    return times


async def _median_load(store: SessionStore, session_id: str, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        loaded = await store.session(session_id)
        samples.append(time.perf_counter() - started)
        assert loaded.seq > 0
    return median(samples)


async def _median_empty_call(backend: Counting, repeats: int) -> float:
    """The engine's cost of one listing call on an empty partition at this data size.

    The test servers scan whole tables and buckets on every listing call (moto), so
    their per-call time grows with the data held; real engines index it. Dividing a
    load's time by this figure, measured in the same run, separates the two.
    """
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await backend.keys("bench/empty")
        samples.append(time.perf_counter() - started)
    return median(samples)


def _record_bytes(commit: Commit) -> bytes:
    record = CommitRecord(
        session_id="bench", seq=2, commit_id=uuid.uuid4().hex, fence=1, commit=commit
    )
    return record.model_dump_json().encode()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="sqlite,s3,dynamodb")
    parser.add_argument("--commits", type=int, default=500, help="commits per round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--every", type=int, default=100, help="baseline interval K")
    parser.add_argument("--out", default="bench/results/store.json")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    sizes = [int(size) for size in args.sizes.split(",")]
    report: dict[str, Any] = {"commit": {}, "load": {}, "load_no_baselines": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for kind in args.backends.split(","):
            report["commit"][kind] = await commit_latency(kind, workdir, args.commits, args.repeats)
            report["load"][kind] = await load_times(kind, workdir, sizes, args.repeats, args.every)
            if kind == "sqlite":
                report["load_no_baselines"][kind] = await load_times(
                    kind, workdir, sizes, args.repeats, 10**9
                )
            print_report(report, kind)
    out = Path(args.out)
    await asyncio.to_thread(out.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(out.write_text, json.dumps(report, indent=2))


def print_report(report: dict[str, Any], kind: str) -> None:
    c = report["commit"][kind]
    print(
        f"{kind:9} commit p50 {ms(c['p50'])} ms  p99 {ms(c['p99'])} ms | raw p50 "
        f"{ms(c['raw_p50'])} ms  p99 {ms(c['raw_p99'])} ms | ratio p50 {c['ratio_p50']:.2f}x"
        f" | record {c['record_bytes']} B"
    )
    for title, key in (("load", "load"), ("load, no baselines", "load_no_baselines")):
        load = report[key].get(kind)
        if not load:
            continue
        sizes = sorted(load)
        cells = "  ".join(
            f"{size}: {ms(load[size]['seconds'])} ms, {load[size]['calls']:.0f} calls, "
            f"{load[size]['bytes'] / 1024:.1f} KiB"
            for size in sizes
        )
        ratio = load[sizes[-1]]["seconds"] / load[sizes[0]]["seconds"]
        print(f"{kind:9} {title}: {cells} | time ratio {sizes[-1]}:{sizes[0]} = {ratio:.2f}")
        per_call = [load[size]["seconds"] / load[size]["empty_call"] for size in sizes]
        floors = "  ".join(f"{size}: {ms(load[size]['empty_call'])} ms" for size in sizes)
        print(
            f"{kind:9} {title}: empty-partition call {floors} | load / empty call "
            f"{'  '.join(f'{x:.1f}' for x in per_call)} | ratio {per_call[-1] / per_call[0]:.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
