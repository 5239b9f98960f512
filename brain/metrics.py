"""Prometheus metrics of one Brain process, served on its probe port (``webapi.exposition``).

===============================================  =========  ==============================
metric                                           type       labels
===============================================  =========  ==============================
``brainhands_brain_wake_start_seconds``          histogram  (a wake's enqueue to its start)
``brainhands_brain_wakes_refused_total``         counter    ``reason`` (forged, foreign jobs)
``brainhands_brain_drives_total``                counter    ``outcome``
``brainhands_brain_leases_lost_total``           counter    ``reason`` (``lapsed``, ``taken``)
``brainhands_brain_results_applied_total``       counter    (operation results committed)
``brainhands_brain_result_apply_seconds``        histogram  (a result's end to its commit)
``brainhands_brain_slots``                       gauge      (sessions driven at once at most)
``brainhands_brain_slots_in_use``                gauge
``brainhands_model_calls_total``                 counter    ``model``, ``outcome``
``brainhands_model_call_seconds``                histogram  ``model``
``brainhands_model_tokens_total``                counter    ``model``, ``type`` (input, output)
``brainhands_model_cost_total``                  counter    ``model`` (the prices' currency)
===============================================  =========  ==============================

Drive outcomes: ``driven`` (ran to where it could not move), ``fenced`` (a newer fence
took the session mid-drive: the store refused this drive's commits), ``lease_lost``
(dropped before the lease could lapse or after another holder took it), ``busy``
(another Brain drives it; the wake goes back to the queue) and ``idle`` (the look found
nothing to do: no lease taken, nothing written). Latencies across processes
(a wake's enqueue, a result's end) compare two hosts' clocks: they are what an operator
watches, never what decides anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Wakes and applies take milliseconds; a backlog makes them seconds or minutes.
LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
#: Model calls take from a tenth of a second to minutes.
MODEL_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
#: Results seen and not yet committed, kept for their apply latency (the oldest dropped).
_SEEN_LIMIT: Final = 10_000


class BrainMetrics:
    """What a Brain process observed; ``registry`` is its own (tests run several)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self._wake_start = Histogram(
            "brainhands_brain_wake_start_seconds",
            "From a wake job's enqueue (the enqueuer's clock) to its start on this Brain",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._wakes_refused = Counter(
            "brainhands_brain_wakes_refused",
            "Wake jobs refused (not the wake of one session id), by reason",
            ["reason"],
            registry=registry,
        )
        self._drives = Counter(
            "brainhands_brain_drives",
            "Wakes this Brain took, by what became of the drive",
            ["outcome"],
            registry=registry,
        )
        self._leases_lost = Counter(
            "brainhands_brain_leases_lost",
            "Drives stopped because their lease was lost: lapsed (not renewed in time) or "
            "taken (another holder has it)",
            ["reason"],
            registry=registry,
        )
        self._applied = Counter(
            "brainhands_brain_results_applied",
            "Operation results committed into their session (each once: the store refuses "
            "a second apply)",
            registry=registry,
        )
        self._apply_seconds = Histogram(
            "brainhands_brain_result_apply_seconds",
            "From a Hands result's end (the Hands' clock) to the commit applying it",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._slots = Gauge(
            "brainhands_brain_slots",
            "Sessions this Brain drives at once at most (its wake slots)",
            registry=registry,
        )
        self._slots_in_use = Gauge(
            "brainhands_brain_slots_in_use", "Sessions this Brain drives now", registry=registry
        )
        self._model_calls = Counter(
            "brainhands_model_calls",
            "Model calls, by model and outcome (ok, unavailable, rejected, error)",
            ["model", "outcome"],
            registry=registry,
        )
        self._model_seconds = Histogram(
            "brainhands_model_call_seconds",
            "Duration of model calls that answered",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=registry,
        )
        self._tokens = Counter(
            "brainhands_model_tokens",
            "Tokens of model calls, by model and type (input, output)",
            ["model", "type"],
            registry=registry,
        )
        self._cost = Counter(
            "brainhands_model_cost",
            "Cost of model calls by the configured prices, in their currency",
            ["model"],
            registry=registry,
        )
        self._seen: dict[str, datetime] = {}

    # -- wakes and drives --------------------------------------------------------------

    def wake_started(self, waited: float) -> None:
        self._wake_start.observe(max(waited, 0.0))

    def wake_refused(self, reason: str) -> None:
        self._wakes_refused.labels(reason).inc()

    def drive(self, outcome: str) -> None:
        self._drives.labels(outcome).inc()

    def lease_lost(self, reason: str) -> None:
        self._leases_lost.labels(reason).inc()

    def slots(self, total: int, in_use: Callable[[], float]) -> None:
        self._slots.set(total)
        self._slots_in_use.set_function(in_use)

    # -- results -----------------------------------------------------------------------

    def result_seen(self, operation_id: str, finished_at: datetime) -> None:
        """A phase read the Hands' result of ``operation_id``; its apply is timed from
        ``finished_at`` when a commit applies it."""
        if len(self._seen) >= _SEEN_LIMIT:
            self._seen.pop(next(iter(self._seen)))
        self._seen[operation_id] = finished_at

    def applied(self, operation_ids: Iterable[str], now: datetime) -> None:
        """A commit applied these operations' results."""
        for operation_id in operation_ids:
            self._applied.inc()
            finished = self._seen.pop(operation_id, None)
            if finished is not None:
                self._apply_seconds.observe(max((now - finished).total_seconds(), 0.0))

    # -- the model ---------------------------------------------------------------------

    def model_call(
        self,
        model: str,
        outcome: str,
        *,
        seconds: float | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: float | None = None,
    ) -> None:
        self._model_calls.labels(model, outcome).inc()
        if seconds is not None:
            self._model_seconds.labels(model).observe(seconds)
        if input_tokens:
            self._tokens.labels(model, "input").inc(input_tokens)
        if output_tokens:
            self._tokens.labels(model, "output").inc(output_tokens)
        if cost:
            self._cost.labels(model).inc(cost)
