"""Wake-to-drive latency (issue 17, goal 2): from ``RQWakes.wake`` to the drive starting.

Three things measured in the same run, round by round on the benchmark's own Redis
(``bench.rig.infrastructure``), one wake at a time (nothing else queued):

* ``consumer``: the Brain's path — ``RQWakes.wake`` (pending marker, job saved and
  pushed) and ``coordination.consumer.WakeConsumer`` (the blocking dequeue, the job read
  and checked, job and marker deleted) up to the drive callback;
* ``rq worker``: the same enqueue taken by RQ's own ``SimpleWorker`` in a thread (what a
  Brain slot ran before), up to the job function;
* ``round trip``: one ``PING`` on the asyncio client: the floor of anything that talks
  to Redis.

The time is taken where the drive (or the job function) starts, so handing the result
back to the benchmark is not counted. Medians over ``--repeats`` rounds of ``--wakes``
wakes::

    python -m bench.wake_latency --repeats 5 --wakes 200
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer
from rq.timeouts import BaseDeathPenalty

from bench.rig import infrastructure
from bench.stats import median
from coordination import redis_client
from coordination.consumer import WakeConsumer
from coordination.wakes import RQWakes

#: when the RQ worker's job function ran, by token (a thread fills it)
_ARRIVALS: queue.SimpleQueue[tuple[str, float]] = queue.SimpleQueue()


def reached(token: str) -> None:
    """The RQ worker's job: note when it started."""
    _arrivals().put((token, time.perf_counter()))


def _arrivals() -> queue.SimpleQueue[tuple[str, float]]:
    """The queue of the module RQ imports by name (run as ``-m``, this file is also
    ``__main__``, whose globals are another copy)."""
    module: Any = importlib.import_module("bench.wake_latency")
    arrivals: queue.SimpleQueue[tuple[str, float]] = module._ARRIVALS
    return arrivals


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--wakes", type=int, default=200)
    parser.add_argument("--out", default="bench/results/wake_latency.json")
    args = parser.parse_args()
    logging.getLogger("rq").setLevel(logging.WARNING)
    rounds: dict[str, list[float]] = {"consumer": [], "rq worker": [], "round trip": []}
    async with infrastructure() as infra:
        url = infra.redis_url
        async with _Consumer(url) as consumer, _RQWorker(url) as worker:
            ping = redis_client.connect(url)
            for _ in range(args.repeats):
                rounds["consumer"].append(median(await consumer.latencies(args.wakes)))
                rounds["rq worker"].append(median(await worker.latencies(args.wakes)))
                rounds["round trip"].append(median(await _pings(ping, args.wakes)))
            await ping.aclose()
    report: dict[str, Any] = {
        "repeats": args.repeats,
        "wakes": args.wakes,
        "load": os.getloadavg()[0],
        "p50_ms": {name: round(median(values) * 1000, 3) for name, values in rounds.items()},
        "rounds_ms": {
            name: [round(v * 1000, 3) for v in values] for name, values in rounds.items()
        },
    }
    p50 = report["p50_ms"]
    report["consumer_vs_rq_worker"] = round(p50["consumer"] / p50["rq worker"], 3)
    print(json.dumps(report, indent=2))
    await asyncio.to_thread(_save, Path(args.out), report)


def _save(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


class _Consumer:
    """``RQWakes`` → ``WakeConsumer`` with a drive that notes when it starts."""

    def __init__(self, url: str) -> None:
        self.prefix = f"bench{uuid.uuid4().hex[:6]}"
        self.wakes = RQWakes(url, prefix=self.prefix)
        self.client = redis_client.connect(url)
        self.failures = redis_client.connect_sync(url)
        self.started: dict[str, float] = {}
        self.arrived = asyncio.Event()
        self.consumer = WakeConsumer(
            self.client,
            self.failures,
            prefix=self.prefix,
            route="default",
            slots=8,
            drive=self._drive,
        )
        self.task: asyncio.Task[None] | None = None

    async def _drive(self, session_id: str) -> str:
        self.started[session_id] = time.perf_counter()
        self.arrived.set()
        return "noted"

    async def latencies(self, count: int) -> list[float]:
        found = []
        for _ in range(count):
            session_id = f"s{uuid.uuid4().hex[:10]}"
            self.arrived.clear()
            sent = time.perf_counter()
            await self.wakes.wake(session_id, reason="bench")
            await asyncio.wait_for(self.arrived.wait(), 10)
            found.append(self.started.pop(session_id) - sent)
        return found

    async def __aenter__(self) -> _Consumer:
        self.task = asyncio.create_task(self.consumer.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.consumer.stop()
        if self.task is not None:
            await self.task
        self.wakes.close()
        self.failures.close()
        await self.client.aclose()


class _NoDeathPenalty(BaseDeathPenalty):
    """RQ's job timeouts use signals, which work only in the main thread."""

    def setup_death_penalty(self) -> None:
        return None

    def cancel_death_penalty(self) -> None:
        return None


class _ThreadWorker(SimpleWorker):
    """RQ's worker as a Brain slot ran it: in a thread, no signal handlers."""

    death_penalty_class = _NoDeathPenalty

    def _install_signal_handlers(self) -> None:
        return None


class _RQWorker:
    """The same enqueue, taken by RQ's ``SimpleWorker`` in a thread."""

    def __init__(self, url: str) -> None:
        self.sync = redis_client.connect_sync(url)
        self.queue = Queue(
            f"bench-rq-{uuid.uuid4().hex[:6]}", connection=self.sync, serializer=JSONSerializer
        )
        self.worker = _ThreadWorker(
            [self.queue], connection=redis_client.connect_sync(url), serializer=JSONSerializer
        )
        self.thread = threading.Thread(target=self._work, daemon=True)

    def _work(self) -> None:
        self.worker.work(with_scheduler=False, logging_level="WARNING")

    async def latencies(self, count: int) -> list[float]:
        found = []
        for _ in range(count):
            token = uuid.uuid4().hex
            sent = time.perf_counter()
            await asyncio.to_thread(self._enqueue, token)
            got, at = await asyncio.to_thread(_arrivals().get, True, 10)
            assert got == token
            found.append(at - sent)
        return found

    def _enqueue(self, token: str) -> None:
        # what RQWakes did before: the marker, then RQ's own enqueue
        self.sync.set(f"bench:pending:{token}", "bench", nx=True, ex=5)
        self.queue.enqueue_call(
            "bench.wake_latency.reached", args=(token,), timeout=-1, result_ttl=600
        )

    async def __aenter__(self) -> _RQWorker:
        self.thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # RQ's loop stops only from a signal in its own thread: the daemon thread ends
        # with the process (its Redis is stopped first)
        self.sync.close()


async def _pings(client: Any, count: int) -> list[float]:
    found = []
    for _ in range(count):
        sent = time.perf_counter()
        await client.ping()
        found.append(time.perf_counter() - sent)
    return found


if __name__ == "__main__":
    asyncio.run(main())
