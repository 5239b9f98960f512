"""Prometheus metrics of the Session API: the Brains' scaling signal, the wake backlog.

The Session API runs whether or not any Brain does, and it already talks to the wake
queues' Redis, so it reports them (``coordination.backlog``) for an autoscaler that
must scale Brains from zero, and for an alert on a route no Brain serves. Read at
scrape time; ``GET /metrics`` needs a read token of the whole deployment.

=============================================  =====  ===================================
metric                                         type   labels
=============================================  =====  ===================================
``brainhands_wake_backlog``                    gauge  ``route``: wakes waiting
``brainhands_wake_oldest_age_seconds``         gauge  ``route``: the oldest one's wait
``brainhands_wake_route_served``               gauge  ``route``: 1 while a Brain serves it
``brainhands_session_api_scrape_errors_total`` count  ``source`` (``redis``)
=============================================  =====  ===================================

A route appears once it has a wake queue or a live advertisement. When Redis does not
answer, the scrape has no backlog series (not stale numbers) and the error is counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from contracts import BrainhandsError
from coordination.backlog import RouteBacklog

log = logging.getLogger(__name__)

#: How long a scrape waits for Redis.
READ_TIMEOUT_S: Final = 2.0

Backlog = Callable[[], Awaitable[list[RouteBacklog]]]


class SessionApiMetrics(Collector):
    """The wake backlog as of the last ``refresh``; ``render`` gives the exposition."""

    def __init__(self, backlog: Backlog | None) -> None:
        self._backlog = backlog
        self._last: list[RouteBacklog] = []
        self.registry = CollectorRegistry()
        self._scrape_errors = Counter(
            "brainhands_session_api_scrape_errors",
            "Gauges that could not be read at scrape time, by source",
            ["source"],
            registry=self.registry,
        )
        self.registry.register(self)

    async def refresh(self) -> None:
        if self._backlog is None:
            self._last = []
            return
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                self._last = await self._backlog()
        except (TimeoutError, BrainhandsError, OSError, RedisError) as error:
            log.warning("metrics: cannot read the wake backlog: %r", error)
            self._scrape_errors.labels("redis").inc()
            self._last = []

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            "brainhands_wake_backlog", "Wake jobs waiting for a Brain, by route", labels=["route"]
        )
        age = GaugeMetricFamily(
            "brainhands_wake_oldest_age_seconds",
            "Seconds the oldest waiting wake job of a route has waited (0: none waits)",
            labels=["route"],
        )
        served = GaugeMetricFamily(
            "brainhands_wake_route_served",
            "1 while a live Brain advertises the route, else 0 (a backlog no Brain serves)",
            labels=["route"],
        )
        for backlog in self._last:
            waiting.add_metric([backlog.route], backlog.waiting)
            age.add_metric([backlog.route], backlog.oldest_age_s)
            served.add_metric([backlog.route], 1.0 if backlog.served else 0.0)
        yield from (waiting, age, served)
