"""Requests the Session Store sends to the S3 and DynamoDB APIs per commit, with several
writers contending for one session and with one writer alone (issue 17, goal 5).

    python -m bench.store_requests --backends s3,dynamodb --writers 8 --commits 300 \\
        --baseline-every 7 --out bench/results/store_requests.json

Each scenario runs on a moto server of its own (started here on a free port, stopped at
the end), so no listing scans what an earlier scenario left behind:

* ``contended``: ``--writers`` asyncio tasks, each with its own store opened on the same
  URL (they contend as separate processes would), commit ``--commits`` times each to one
  session — one entry and an update of the writer's own task per commit, fence 1 — and
  on ``ConflictError`` refresh and try again;
* ``single``: one writer making the same total number of commits.

Requests are counted by operation (``PutObject``, ``Query``…) on every client the store
creates: a ``before-send`` handler counts each HTTP attempt (a transport retry counts
again), a ``before-call`` handler each API call, and ``after-call`` the error codes
answered. Each request is put down to the phase that made it: ``commit`` (the append),
``refresh`` (catching up after a conflict), ``load`` (opening the session) or
``baseline`` (inside ``Baselines.write``, which runs in the background). Time figures are
noisy on a busy machine and moto's listings scan everything it holds; the counts are
what to compare.

Run it again from a worktree of an older commit with ``--label before`` and the same
``--out`` to compare: runs are kept by label, and ``comparison`` puts every run's
headline figures side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import session_store.backends.dynamodb
import session_store.backends.s3
from contracts import Commit, ConflictError
from session_store import SessionHandle, open_backend, open_store
from session_store.backends import aws
from session_store.baselines import Baselines
from tests.support.builders import advance, entry, task

SESSION = "contended"
_REPO = Path(__file__).resolve().parents[1]
#: the phase a request is put down to; set around each store call the writers make
_PHASE: contextvars.ContextVar[str] = contextvars.ContextVar("phase", default="setup")
#: phases that belong to the workload (setup and the final check do not)
_WORKLOAD = ("load", "commit", "refresh", "baseline")
_CLIENT_MODULES = (session_store.backends.s3, session_store.backends.dynamodb)
_OPEN_CLIENT = "open_client"


@dataclass
class Tally:
    """What the clients sent, by phase and operation, and what the writers saw."""

    sends: Counter[tuple[str, str]] = field(default_factory=Counter)
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    commits: int = 0
    conflicts: int = 0
    baselines: int = 0
    baselines_failed: int = 0

    def on_send(self, event_name: str, **_: Any) -> None:
        # returns None: botocore takes a before-send handler's answer as the response
        self.sends[(_PHASE.get(), event_name.rsplit(".", 1)[-1])] += 1

    def on_call(self, event_name: str, **_: Any) -> None:
        self.calls[(_PHASE.get(), event_name.rsplit(".", 1)[-1])] += 1

    def on_answer(self, event_name: str, parsed: dict[str, Any], **_: Any) -> None:
        code = parsed.get("Error", {}).get("Code")
        if code:
            self.errors[(event_name.rsplit(".", 1)[-1], str(code))] += 1


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    token = _PHASE.set(name)
    try:
        yield
    finally:
        _PHASE.reset(token)


@contextlib.contextmanager
def instrumented(tally: Tally) -> Iterator[None]:
    """Count the requests of every client the S3 and DynamoDB backends open, and mark
    what ``Baselines.write`` sends (it runs in background tasks) as the baseline's."""
    open_client, write = aws.open_client, Baselines.write

    async def counted_client(*args: Any, **kwargs: Any) -> Any:
        client = await open_client(*args, **kwargs)
        client.meta.events.register("before-send", tally.on_send)
        client.meta.events.register("before-call", tally.on_call)
        client.meta.events.register("after-call", tally.on_answer)
        return client

    async def counted_write(self: Baselines, snapshot: Any) -> Any:
        with phase("baseline"):
            try:
                settled = await write(self, snapshot)
            except BaseException:
                tally.baselines_failed += 1
                raise
        tally.baselines += 1
        return settled

    # each backend module bound the name when it imported it
    for module in _CLIENT_MODULES:
        setattr(module, _OPEN_CLIENT, counted_client)
    Baselines.write = counted_write  # type: ignore[method-assign]
    try:
        yield
    finally:
        for module in _CLIENT_MODULES:
            setattr(module, _OPEN_CLIENT, open_client)
        Baselines.write = write  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def moto_server() -> AsyncIterator[str]:
    """A moto server of this run's own on a free port; its endpoint URL."""
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "moto.server",
        "-H",
        "127.0.0.1",
        "-p",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _until_listening(port, deadline=time.monotonic() + 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
            await server.wait()


def _free_port() -> int:
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in (15000, 25000):  # other runs' servers
            return port


async def _until_listening(port: int, *, deadline: float) -> None:
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"moto server did not listen on port {port}") from None
            await asyncio.sleep(0.2)
            continue
        writer.close()
        await writer.wait_closed()
        return


def location(kind: str, endpoint: str) -> str:
    token = uuid.uuid4().hex[:10]
    if kind == "s3":
        return f"s3://bh-requests/{token}?endpoint_url={endpoint}"
    return f"dynamodb://bh-requests-{token}?endpoint_url={endpoint}"


def next_commit(handle: SessionHandle, task_id: str, n: int) -> Commit:
    """One entry and the next revision of this writer's own task, from the state as it is."""
    current = handle.state.tasks.get(task_id)
    updated = task(task_id) if current is None else advance(current, phase=f"p{n}")
    return Commit(entries=(entry(f"{task_id}-{n}"),), tasks=(updated,))


async def commit_all(handle: SessionHandle, number: int, commits: int, tally: Tally) -> None:
    """Commit ``commits`` times, refreshing after each conflict."""
    task_id, done = f"w{number}", 0
    while done < commits:
        try:
            with phase("commit"):
                await handle.commit(next_commit(handle, task_id, done), fence=1)
        except ConflictError:
            tally.conflicts += 1
            with phase("refresh"):
                await handle.refresh()
            continue
        done += 1
        tally.commits += 1


async def contend(url: str, writers: int, commits: int, every: int, tally: Tally) -> float:
    """Every writer opens its own store and loads the session, then all commit at once;
    the seconds from the first commit until the last baseline was written."""
    async with contextlib.AsyncExitStack() as stack:
        stores = []
        for _ in range(writers):
            store = await open_store(url, baseline_every=every)
            stack.push_async_callback(store.close)
            stores.append(store)
        with phase("load"):
            handles = await asyncio.gather(*(store.session(SESSION) for store in stores))
        started = time.perf_counter()
        await asyncio.gather(
            *(commit_all(handle, n, commits, tally) for n, handle in enumerate(handles))
        )
        for store in stores:
            await store.flush()  # the baselines started in the background
        return time.perf_counter() - started


async def scenario(kind: str, writers: int, commits: int, every: int) -> dict[str, Any]:
    tally = Tally()
    load_start = os.getloadavg()
    async with moto_server() as endpoint:
        url = location(kind, endpoint)
        with instrumented(tally):
            backend = await open_backend(url, create=True)
            await backend.close()
            seconds = await contend(url, writers, commits, every, tally)
            with phase("verify"):
                head = await _head(url)
    if head != writers * commits:
        raise RuntimeError(f"{kind}: the log holds {head} commits, not {writers * commits}")
    return summary(tally, writers, commits, seconds) | {
        "load_average": {"start": load_start, "end": os.getloadavg()}
    }


async def _head(url: str) -> int:
    store = await open_store(url, read_only=True)
    try:
        return (await store.session(SESSION)).seq
    finally:
        await store.close()


def summary(tally: Tally, writers: int, commits: int, seconds: float) -> dict[str, Any]:
    made = tally.commits
    sends = Counter({key: n for key, n in tally.sends.items() if key[0] in _WORKLOAD})
    calls = sum(n for key, n in tally.calls.items() if key[0] in _WORKLOAD)
    total = sum(sends.values())
    by_op: Counter[str] = Counter()
    by_phase: dict[str, Counter[str]] = {}
    for (where, op), n in sends.items():
        by_op[op] += n
        by_phase.setdefault(where, Counter())[op] += n
    baseline = by_phase.get("baseline", Counter())
    per_baseline = max(tally.baselines, 1)
    return {
        "writers": writers,
        "commits_per_writer": commits,
        "commits": made,
        "seconds": round(seconds, 2),
        "commits_per_second": round(made / seconds, 1),
        "conflicts": tally.conflicts,
        "conflicts_per_commit": _ratio(tally.conflicts, made),
        "requests": total,
        "requests_per_commit": _ratio(total, made),
        "transport_retries": total - calls,
        "by_operation_per_commit": _per(by_op, made),
        "by_phase_per_commit": {
            where: _ratio(sum(ops.values()), made) for where, ops in sorted(by_phase.items())
        },
        "by_phase_operation": {where: dict(sorted(ops.items())) for where, ops in by_phase.items()},
        "errors": {f"{op} {code}": n for (op, code), n in sorted(tally.errors.items())},
        "baselines": {
            "written": tally.baselines,
            "failed": tally.baselines_failed,
            "requests": sum(baseline.values()),
            "requests_per_baseline": _ratio(sum(baseline.values()), per_baseline),
            "by_operation_per_baseline": _per(baseline, per_baseline),
            "requests_per_commit": _ratio(sum(baseline.values()), made),
        },
        "setup_and_check_requests": sum(tally.sends.values()) - total,
    }


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 3) if whole else 0.0


def _per(counts: Counter[str], whole: int) -> dict[str, float]:
    return {op: _ratio(n, whole) for op, n in sorted(counts.items(), key=lambda kv: -kv[1])}


def revision() -> dict[str, str]:
    """The commit of the code measured (this file's checkout) and where the store is."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "sha": git("rev-parse", "HEAD"),
        "subject": git("log", "-1", "--format=%s")[:200],
        "session_store": str(Path(session_store.__file__).parent),
        # the measured store differs from that commit in these files
        "modified": git("diff", "--name-only", "HEAD", "--", "session_store", "contracts"),
    }


def compare(runs: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of every run side by side, per backend and scenario."""
    found: dict[str, dict[str, Any]] = {}
    for label, run in runs.items():
        for kind, scenarios in run["backends"].items():
            for name, result in scenarios.items():
                found.setdefault(f"{kind} {name}", {})[label] = headline(result)
    return found


def headline(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "requests_per_commit": result["requests_per_commit"],
        "conflicts_per_commit": result["conflicts_per_commit"],
        "by_phase_per_commit": result["by_phase_per_commit"],
        "requests_per_baseline": result["baselines"]["requests_per_baseline"],
        "seconds": result["seconds"],
    }


def print_scenario(kind: str, name: str, result: dict[str, Any]) -> None:
    ops = "  ".join(f"{op} {n}" for op, n in result["by_operation_per_commit"].items())
    phases = "  ".join(f"{where} {n}" for where, n in result["by_phase_per_commit"].items())
    base = result["baselines"]
    print(
        f"{kind:8} {name:9} {result['writers']}x{result['commits_per_writer']}: "
        f"{result['requests_per_commit']} requests/commit, {result['conflicts_per_commit']} "
        f"conflicts/commit, {result['seconds']} s\n"
        f"         by operation: {ops}\n         by phase: {phases}\n"
        f"         baselines: {base['written']} written ({base['failed']} failed), "
        f"{base['requests_per_baseline']} requests each {base['by_operation_per_baseline']}",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="s3,dynamodb")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--commits", type=int, default=300, help="commits per writer")
    parser.add_argument("--baseline-every", type=int, default=7)
    parser.add_argument("--label", default="after", help="run name in --out (before/after)")
    parser.add_argument("--note", default="", help="what this run measures, for --out")
    parser.add_argument("--out", default="bench/results/store_requests.json")
    args = parser.parse_args()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "testing"  # our own moto server; never real keys
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    total = args.writers * args.commits
    run: dict[str, Any] = revision() | {
        "note": args.note,
        "parameters": {
            "writers": args.writers,
            "commits": args.commits,
            "baseline_every": args.baseline_every,
        },
        "backends": {},
    }
    for kind in args.backends.split(","):
        shapes = {"contended": (args.writers, args.commits), "single": (1, total)}
        run["backends"][kind] = {}
        for name, (writers, commits) in shapes.items():
            result = await scenario(kind, writers, commits, args.baseline_every)
            run["backends"][kind][name] = result
            print_scenario(kind, name, result)
    await asyncio.to_thread(save, Path(args.out), args.label, run)


def save(out: Path, label: str, run: dict[str, Any]) -> None:
    report: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    runs = report.setdefault("runs", {})
    runs[label] = run
    report["comparison"] = compare(runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
