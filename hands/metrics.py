"""Prometheus metrics of one Hands process.

Two kinds: what this process's executor observed (results it wrote, operations it
parked), counted as they happen; and gauges read at scrape time (the dispatch queue's
depth on JetStream, this host's running containers). Each ``HandsMetrics`` has its own
registry, so two in one process (tests) never meet.

=========================================  =========  =================================
metric                                     type       labels
=========================================  =========  =================================
``brainhands_hands_operations_total``      counter    ``status``, ``termination``
``brainhands_hands_run_seconds``           histogram  ``termination``
``brainhands_hands_queue_pending``         gauge      (messages not yet delivered)
``brainhands_hands_queue_ack_pending``     gauge      (delivered, not yet acked)
``brainhands_hands_queue_oldest_age_seconds``  gauge  (the oldest dispatch not yet acked)
``brainhands_hands_containers_running``    gauge
``brainhands_hands_scrape_errors_total``   counter    ``source`` (``bus``, ``sandbox``)
``brainhands_hands_refused_total``         counter    ``kind`` (``dispatch``, ``cancel``),
                                                      ``reason``
``brainhands_hands_loop_errors_total``     counter    ``loop`` (``reaper``, ``handle``...)
=========================================  =========  =================================

A gauge that could not be read is NaN for that scrape (never a stale number).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Final

import nats.errors
import nats.js.errors
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from bus import DISPATCH_STREAM, Bus
from contracts import BrainhandsError, OperationResult
from contracts.tool import Termination
from hands.sandbox import RunState, Sandbox

log = logging.getLogger(__name__)

#: Tool runs take from a fraction of a second to the longest timeouts (hours).
RUN_SECONDS_BUCKETS: Final = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: How long a scrape waits for NATS or the container engine.
READ_TIMEOUT_S: Final = 2.0
#: The durable consumer every Hands shares (``hands.service.CONSUMER``; not imported:
#: the executor imports this module, and the service imports the executor).
CONSUMER: Final = "hands"
#: The ``termination`` label of results without one (refused before any run).
NO_TERMINATION: Final = "none"


class HandsMetrics:
    """Counters the executor feeds (``observe``, ``parked``) and scrape-time gauges
    (``refresh``); ``render`` gives the text exposition."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._operations = Counter(
            "brainhands_hands_operations",
            "Operations this process brought to an outcome, by status and termination",
            ["status", "termination"],
            registry=self.registry,
        )
        self._run_seconds = Histogram(
            "brainhands_hands_run_seconds",
            "Wall-clock time of sandboxed runs (executed or replayed), start to end",
            ["termination"],
            buckets=RUN_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self._pending = Gauge(
            "brainhands_hands_queue_pending",
            "Dispatches in the JetStream work queue not yet delivered to any Hands",
            registry=self.registry,
        )
        self._ack_pending = Gauge(
            "brainhands_hands_queue_ack_pending",
            "Dispatches delivered to a Hands and not yet acknowledged",
            registry=self.registry,
        )
        self._oldest = Gauge(
            "brainhands_hands_queue_oldest_age_seconds",
            "Seconds since the oldest dispatch still in the work queue (waiting or in "
            "flight) was published; 0 when the queue is empty",
            registry=self.registry,
        )
        self._running = Gauge(
            "brainhands_hands_containers_running",
            "Containers of this deployment running on this host",
            registry=self.registry,
        )
        self._scrape_errors = Counter(
            "brainhands_hands_scrape_errors",
            "Gauges that could not be read at scrape time, by source",
            ["source"],
            registry=self.registry,
        )

        self._refused = Counter(
            "brainhands_hands_refused",
            "Messages refused because the store holds nothing that backs them "
            "(no committed intent, no recorded cancellation), by kind and reason",
            ["kind", "reason"],
            registry=self.registry,
        )
        self._loop_errors = Counter(
            "brainhands_hands_loop_errors",
            "Iterations of a long-running loop that failed and were skipped (the loop "
            "goes on), by loop",
            ["loop"],
            registry=self.registry,
        )

    # -- fed by the executor -----------------------------------------------------------

    def observe(self, result: OperationResult, seconds: float | None = None) -> None:
        """A result this process wrote. Its run time is ``seconds`` if given, else taken
        from the result's ``started_at``/``finished_at`` for executed or replayed runs."""
        termination = result.termination or NO_TERMINATION
        self._operations.labels(status_of(result), termination).inc()
        ran = result.path in {"executed", "replayed"}
        if seconds is None and ran and result.started_at is not None:
            seconds = (result.finished_at - result.started_at).total_seconds()
        if seconds is not None:
            self._run_seconds.labels(termination).observe(max(seconds, 0.0))

    def parked(self) -> None:
        """An operation this process left ``uncertain`` for an operator."""
        self._operations.labels("uncertain", NO_TERMINATION).inc()

    def refused(self, kind: str, reason: str) -> None:
        """A message the store does not back (a forged, stale or foreign one)."""
        self._refused.labels(kind, reason).inc()

    def refused_count(self, kind: str, reason: str) -> float:
        return float(self._refused.labels(kind, reason)._value.get())

    def loop_error(self, loop: str) -> None:
        """One iteration of ``loop`` failed; it goes on."""
        self._loop_errors.labels(loop).inc()

    def loop_error_count(self, loop: str) -> float:
        return float(self._loop_errors.labels(loop)._value.get())

    # -- read at scrape time -----------------------------------------------------------

    async def refresh(self, *, sandbox: Sandbox, bus: Bus | None) -> None:
        """Read the gauges: the queue (when there is a bus) and running containers."""
        await asyncio.gather(self._refresh_queue(bus), self._refresh_containers(sandbox))

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition in the format ``accept`` asks for: (body, content type)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    async def _refresh_queue(self, bus: Bus | None) -> None:
        pending = ack_pending = oldest = math.nan
        if bus is not None:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    pending, ack_pending = await _queue_depth(bus)
                    oldest = await _oldest_age(bus)
            except (TimeoutError, nats.errors.Error, OSError) as error:
                log.warning("metrics: cannot read the dispatch queue: %s", error)
                self._scrape_errors.labels("bus").inc()
        self._pending.set(pending)
        self._ack_pending.set(ack_pending)
        self._oldest.set(oldest)

    async def _refresh_containers(self, sandbox: Sandbox) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                runs = await sandbox.owned()
            running: float = sum(1 for run in runs if run.state is RunState.RUNNING)
        except (TimeoutError, BrainhandsError, OSError) as error:
            log.warning("metrics: cannot list containers: %s", error)
            self._scrape_errors.labels("sandbox").inc()
            running = math.nan
        self._running.set(running)


def status_of(result: OperationResult) -> str:
    """The operation status a result closes its record with."""
    if result.termination == Termination.CANCELLED.value:
        return "cancelled"
    return "succeeded" if result.succeeded else "failed"


async def _queue_depth(bus: Bus) -> tuple[float, float]:
    """(pending, ack pending) of the shared consumer; before any Hands created it, every
    message in the work-queue stream is pending."""
    stream = bus.stream(DISPATCH_STREAM)
    try:
        info = await bus.js.consumer_info(stream, CONSUMER)
    except nats.js.errors.NotFoundError:
        stream_info = await bus.js.stream_info(stream)
        return float(stream_info.state.messages), 0.0
    return float(info.num_pending or 0), float(info.num_ack_pending or 0)


async def _oldest_age(bus: Bus) -> float:
    """Seconds since the first message of the work-queue stream (acknowledged dispatches
    are removed from it, so the first one is the oldest waiting or in flight) was
    published, by the server's timestamp and this host's clock (an approximation across
    hosts: a scaling signal, never a decision)."""
    stream = bus.stream(DISPATCH_STREAM)
    state = (await bus.js.stream_info(stream)).state
    if not state.messages:
        return 0.0
    try:
        first = await bus.js.get_msg(stream, seq=state.first_seq, next=True)
    except nats.js.errors.NotFoundError:
        return 0.0  # taken meanwhile
    if first.time is None:
        return math.nan
    return max(0.0, time.time() - first.time.timestamp())
