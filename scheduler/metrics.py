"""Prometheus metrics of a scheduler, served on its probe port (``webapi.exposition``).

The scheduler runs whether or not any Hands does, so it reports the dispatch work
queue's backlog (``bus.backlog``) for an autoscaler that must scale the Hands from zero,
and the results stream's (result events not yet turned into wakes: growing, it says the
schedulers are behind); the wake queues' backlog is the Session API's
(``session_api.metrics``).

===================================================  =======  ==============================
metric                                               type     labels
===================================================  =======  ==============================
``brainhands_scheduler_wakes_total``                 counter  ``cause`` (result, timer,
                                                              lapsed, reconcile)
``brainhands_scheduler_reconcile_passes_total``      counter
``brainhands_scheduler_dispatches_reissued_total``   counter
``brainhands_scheduler_refused_total``               counter  ``door`` (results, attention,
                                                              due), ``reason`` (not_backed,
                                                              invalid_id, malformed)
``brainhands_scheduler_reissues_duplicate_total``    counter  (re-issues the bus dropped)
``brainhands_scheduler_workspace_collected_total``   counter  ``what`` (blobs)
``brainhands_dispatch_backlog``                      gauge    ``state`` (pending, in_flight)
``brainhands_dispatch_oldest_age_seconds``           gauge
``brainhands_results_backlog``                       gauge    ``state`` (pending, in_flight)
``brainhands_results_oldest_age_seconds``            gauge
``brainhands_scheduler_scrape_errors_total``         counter  ``source`` (``bus``)
===================================================  =======  ==============================

``cause="lapsed"`` counts leases whose holder let them lapse (a Brain died mid-drive):
each one's session is woken at once. When NATS does not answer, the scrape has no
backlog series (not stale numbers) and the error is counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import nats.errors
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bus.backlog import Backlog, dispatch_backlog, results_backlog

if TYPE_CHECKING:
    from scheduler.service import Scheduler

log = logging.getLogger(__name__)

#: How long a scrape waits for NATS.
READ_TIMEOUT_S: Final = 2.0


class SchedulerMetrics(Collector):
    """The scheduler's own counts, read at scrape time, and the dispatch backlog as of
    the last ``refresh``."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.registry = CollectorRegistry()
        self._backlog: Backlog | None = None
        self._results: Backlog | None = None
        self._errors = Counter(
            "brainhands_scheduler_scrape_errors",
            "Gauges that could not be read at scrape time, by source",
            ["source"],
            registry=self.registry,
        )
        self.registry.register(self)

    async def refresh(self) -> None:
        self._backlog = self._results = None
        bus = self.scheduler.bus
        if bus is None:
            return
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                self._backlog, self._results = await asyncio.gather(
                    dispatch_backlog(bus), results_backlog(bus)
                )
        except (TimeoutError, nats.errors.Error, OSError) as error:
            log.warning("metrics: cannot read the streams' backlogs: %s", error)
            self._errors.labels("bus").inc()

    def collect(self) -> Iterator[Metric]:
        scheduler = self.scheduler
        wakes = CounterMetricFamily(
            "brainhands_scheduler_wakes",
            "Wakes this scheduler asked for, by cause (lapsed: a lease whose holder let it lapse)",
            labels=["cause"],
        )
        for cause in ("result", "timer", "lapsed", "reconcile"):
            wakes.add_metric([cause], scheduler.woken[cause])
        yield wakes
        yield CounterMetricFamily(
            "brainhands_scheduler_reconcile_passes",
            "Reconciler passes this scheduler ran",
            value=scheduler.passes,
        )
        yield CounterMetricFamily(
            "brainhands_scheduler_dispatches_reissued",
            "Dispatches published again from the store's committed intents",
            value=scheduler.reissued,
        )
        yield CounterMetricFamily(
            "brainhands_scheduler_reissues_duplicate",
            "Re-issued dispatches the bus dropped as duplicates of an earlier message id",
            value=scheduler.duplicates,
        )
        collected = CounterMetricFamily(
            "brainhands_scheduler_workspace_collected",
            "Workspace blobs (files and versions' manifests) this scheduler's collection "
            "passes deleted",
            labels=["what"],
        )
        # a pass over the whole store does not tell a manifest from a file: blobs only
        collected.add_metric(["blobs"], scheduler.collection.collected["blobs"])
        yield collected
        refused = CounterMetricFamily(
            "brainhands_scheduler_refused",
            "What a door refused, by door and reason: result events the store does not "
            "back (forged or foreign) or that are malformed, members of the attention and "
            "due sets that are not session ids",
            labels=["door", "reason"],
        )
        for (door, reason), count in sorted(scheduler.refusals().items()):
            refused.add_metric([door, reason], count)
        yield refused
        if self._backlog is not None:
            yield from _backlog(
                "dispatch", self._backlog, "Dispatches in the work queue", "any Hands"
            )
        if self._results is not None:
            yield from _backlog(
                "results", self._results, "Result events in the results stream", "a scheduler"
            )


def _backlog(name: str, backlog: Backlog, what: str, whom: str) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        f"brainhands_{name}_backlog",
        f"{what}: pending (not yet delivered to {whom}) and in_flight (delivered, not yet "
        "acknowledged)",
        labels=["state"],
    )
    depth.add_metric(["pending"], backlog.pending)
    depth.add_metric(["in_flight"], backlog.ack_pending)
    yield depth
    yield GaugeMetricFamily(
        f"brainhands_{name}_oldest_age_seconds",
        f"Seconds since the oldest of the {name} not yet acknowledged was published (0 when none)",
        value=backlog.oldest_age,
    )
