"""Prometheus metrics of one Hands process.

Two kinds: what this process's executor observed (results it wrote, operations it
parked), counted as they happen; and gauges read at scrape time (the dispatch queue's
depth on JetStream, this host's running containers). Each ``HandsMetrics`` has its own
registry, so two in one process (tests) never meet.

=========================================  =========  =================================
metric                                     type       labels
=========================================  =========  =================================
``brainhands_hands_operations_total``      counter    ``tool``, ``status``, ``termination``
``brainhands_hands_run_seconds``           histogram  ``termination``
``brainhands_hands_dispatch_wait_seconds`` histogram  (publication to delivery here)
``brainhands_hands_sandbox_start_seconds`` histogram  (asking the sandbox to run to its start)
``brainhands_hands_slots``                 gauge      (operations this process runs at once)
``brainhands_hands_slots_in_use``          gauge
``brainhands_hands_queue_pending``         gauge      (messages not yet delivered)
``brainhands_hands_queue_ack_pending``     gauge      (delivered, not yet acked)
``brainhands_hands_queue_oldest_age_seconds``  gauge  (the oldest dispatch not yet acked)
``brainhands_hands_containers_running``    gauge
``brainhands_hands_scrape_errors_total``   counter    ``source`` (``bus``, ``sandbox``)
``brainhands_hands_refused_total``         counter    ``kind`` (``dispatch``, ``cancel``: the
                                                      door), ``reason`` (``not_committed``,
                                                      ``not_recorded``, ``operation_mismatch``,
                                                      ``invalid_id``, ``malformed``)
``brainhands_hands_loop_errors_total``     counter    ``loop`` (``reaper``, ``handle``...)
=========================================  =========  =================================

A gauge that could not be read is NaN for that scrape (never a stale number).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Final

import nats.errors
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bus import Bus
from bus.backlog import dispatch_backlog
from contracts import BrainhandsError, OperationResult
from contracts.tool import Termination
from hands.sandbox import RunState, Sandbox

log = logging.getLogger(__name__)

#: Tool runs take from a fraction of a second to the longest timeouts (hours).
RUN_SECONDS_BUCKETS: Final = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: How long a scrape waits for NATS or the container engine.
READ_TIMEOUT_S: Final = 2.0
#: Waits in the dispatch queue and sandbox starts: milliseconds to minutes.
WAIT_SECONDS_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: The ``termination`` label of results without one (refused before any run).
NO_TERMINATION: Final = "none"


class HandsMetrics:
    """Counters the executor feeds (``observe``, ``parked``) and scrape-time gauges
    (``refresh``); ``render`` gives the text exposition."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._operations = Counter(
            "brainhands_hands_operations",
            "Operations this process brought to an outcome, by tool, status and termination",
            ["tool", "status", "termination"],
            registry=self.registry,
        )
        self._run_seconds = Histogram(
            "brainhands_hands_run_seconds",
            "Wall-clock time of sandboxed runs (executed or replayed), start to end",
            ["termination"],
            buckets=RUN_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self._dispatch_wait = Histogram(
            "brainhands_hands_dispatch_wait_seconds",
            "From a dispatch's publication (the NATS server's clock) to its delivery to "
            "this Hands (this host's clock)",
            buckets=WAIT_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self._sandbox_start = Histogram(
            "brainhands_hands_sandbox_start_seconds",
            "From asking the sandbox to run an operation to the run's start",
            buckets=WAIT_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self._slots = Gauge(
            "brainhands_hands_slots",
            "Operations this process runs at once at most (its concurrency)",
            registry=self.registry,
        )
        self._slots_in_use = Gauge(
            "brainhands_hands_slots_in_use",
            "Operations this process is handling now",
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
            "Messages refused: the store holds nothing that backs them (no committed "
            "intent, no recorded cancellation), or they are not messages of their kind at "
            "all (malformed, an invalid id), by kind (the door) and reason",
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

    def observe(self, result: OperationResult, *, tool: str, seconds: float | None = None) -> None:
        """A result of ``tool`` this process wrote. Its run time is ``seconds`` if given,
        else taken from ``started_at``/``finished_at`` for executed or replayed runs."""
        termination = result.termination or NO_TERMINATION
        self._operations.labels(tool, status_of(result), termination).inc()
        ran = result.path in {"executed", "replayed"}
        if seconds is None and ran and result.started_at is not None:
            seconds = (result.finished_at - result.started_at).total_seconds()
        if seconds is not None:
            self._run_seconds.labels(termination).observe(max(seconds, 0.0))

    def parked(self, tool: str) -> None:
        """An operation of ``tool`` this process left ``uncertain`` for an operator."""
        self._operations.labels(tool, "uncertain", NO_TERMINATION).inc()

    def delivered(self, waited: float) -> None:
        """A dispatch reached this Hands ``waited`` seconds after its publication."""
        self._dispatch_wait.observe(max(waited, 0.0))

    def sandbox_started(self, seconds: float) -> None:
        """A run started ``seconds`` after this process asked the sandbox for it."""
        self._sandbox_start.observe(max(seconds, 0.0))

    def slots(self, total: int, in_use: Callable[[], float]) -> None:
        """This process's concurrency, and how to count the slots in use at scrape time."""
        self._slots.set(total)
        self._slots_in_use.set_function(in_use)

    def refused(self, kind: str, reason: str) -> None:
        """A message the store does not back (a forged, stale or foreign one), or one
        that is not a message of its kind (``invalid_id``, ``malformed``)."""
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

    async def _refresh_queue(self, bus: Bus | None) -> None:
        pending = ack_pending = oldest = math.nan
        if bus is not None:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    backlog = await dispatch_backlog(bus)
                pending, ack_pending, oldest = (
                    backlog.pending,
                    backlog.ack_pending,
                    backlog.oldest_age,
                )
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
