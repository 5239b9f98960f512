"""Prometheus metrics of a worker process, served beside its probes.

The APIs (Session API, Hands API) serve ``/metrics`` behind their own tokens. The workers
(Brain, Hands, scheduler) have no API, so their ``/metrics`` is served on the probe port
(``BH_PROBE_PORT``, ``webapi.probes.serve``) behind the deployment's scrape token:
``BH_METRICS_TOKEN`` (or ``BH_METRICS_TOKENS_FILE``, scoped tokens as for the APIs). The
probes stay open; without a scrape token the port serves no metrics (and says so once in
the log), never open ones.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webapi.auth import Grant, grants_from_env

#: the scrape token's variables (``{PREFIX}_TOKEN``, ``{PREFIX}_TOKENS_FILE``)
PREFIX: Final = "BH_METRICS"


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Scrape:
    """A process's registry and what to read into it before each scrape (gauges of
    queues, containers...)."""

    registry: CollectorRegistry
    refresh: Callable[[], Awaitable[None]] = field(default=_nothing)

    async def render(self, accept: str | None = None) -> tuple[bytes, str]:
        await self.refresh()
        return render(self.registry, accept)

    def route(self) -> Route:
        async def metrics(request: Request) -> Response:
            body, content_type = await self.render(request.headers.get("accept"))
            return Response(body, media_type=content_type)

        return Route("/metrics", metrics, methods=["GET"])


def render(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """The exposition in the format ``accept`` asks for: (body, content type)."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def scrape_grants() -> tuple[Grant, ...]:
    """The scrape tokens of ``BH_METRICS_TOKEN``/``BH_METRICS_TOKENS_FILE``; none when
    neither is set (``InvalidInput`` when one is set and invalid)."""
    if not (os.environ.get(f"{PREFIX}_TOKEN") or os.environ.get(f"{PREFIX}_TOKENS_FILE")):
        return ()
    return grants_from_env(PREFIX, "metrics endpoint")
