"""Liveness and readiness of a service process: ``GET /livez`` and ``GET /readyz``.

``/livez`` answers 200 while the process's event loop serves requests and its main task
has not ended (``alive``): a liveness probe restarts a process that answers 503 or
nothing. ``/readyz`` runs the service's checks (each an awaitable that raises when its
dependency does not answer: the store, Redis, NATS, the engine, a Brain's wake route,
a Hands' consumer) at once, each bounded by ``timeout``, and answers 200 when all pass,
503 with the failing ones otherwise; a readiness probe takes the process out of
traffic, it does not restart it. Results are kept for ``cache`` seconds so a burst of
probes costs one round of checks.

Both are open (orchestrators probe without tokens) and say only the service, its build
id (``runtime.build``), each check's name, pass or fail and the error's class — no
addresses, no messages; the full error is logged.
The APIs mount ``router()``; the workers (Brain, Hands, scheduler) serve ``app()`` on
``BH_PROBE_PORT`` when it is set (``serve``), with their ``/metrics`` beside the probes
behind the scrape token (``webapi.exposition``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from runtime.build import build_id
from webapi.auth import BearerAuth
from webapi.exposition import Scrape, scrape_grants
from webapi.server import serving

log = logging.getLogger(__name__)

PATHS = frozenset({"/livez", "/readyz"})

Check = Callable[[], Awaitable[object]]
#: the workers' command-line options (``python -m brain worker``, ``hands``, ``scheduler``)
ProbePort = Annotated[
    int | None,
    typer.Option(envvar="BH_PROBE_PORT", help="serve /livez and /readyz on this port"),
]
ProbeHost = Annotated[
    str, typer.Option(envvar="BH_PROBE_HOST", help="the probes' address (0.0.0.0 in a container)")
]


@dataclass
class Probes:
    service: str
    checks: Mapping[str, Check] = field(default_factory=dict)
    #: False once the process's main task ended (it is then not live)
    alive: Callable[[], bool] = lambda: True
    timeout: float = 2.0
    cache: float = 1.0
    _last: tuple[float, dict[str, str]] | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def failing(self) -> dict[str, str]:
        """The checks that fail now, with their error's class ("timeout" when slow)."""
        async with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.cache:
                return self._last[1]
            names = list(self.checks)
            outcomes = await asyncio.gather(*(self._one(name) for name in names))
            failing = {name: why for name, why in zip(names, outcomes, strict=True) if why}
            self._last = (time.monotonic(), failing)
            return failing

    async def _one(self, name: str) -> str:
        try:
            async with asyncio.timeout(self.timeout):
                await self.checks[name]()
        except TimeoutError:
            log.warning(
                "%s not ready: %s did not answer in %.1f s", self.service, name, self.timeout
            )
            return "timeout"
        except Exception as error:
            log.warning("%s not ready: %s: %s", self.service, name, error)
            return type(error).__name__
        return ""

    async def livez(self, request: Request) -> JSONResponse:
        if not self.alive():
            return JSONResponse({**self._who(), "status": "dead"}, 503)
        return JSONResponse({**self._who(), "status": "live"})

    def _who(self) -> dict[str, str]:
        return {"service": self.service, "build": build_id()}

    async def readyz(self, request: Request) -> JSONResponse:
        failing = await self.failing() if self.alive() else {"process": "dead"}
        checks = {name: failing.get(name, "ok") for name in [*self.checks, *failing]}
        status = "not_ready" if failing else "ready"
        return JSONResponse(
            {**self._who(), "status": status, "checks": checks}, 503 if failing else 200
        )

    def routes(self) -> list[Route]:
        return [
            Route("/livez", self.livez, methods=["GET"]),
            Route("/readyz", self.readyz, methods=["GET"]),
        ]

    def app(self) -> Starlette:
        return Starlette(routes=self.routes())

    def mount(self, app: Starlette) -> None:
        """Add ``/livez`` and ``/readyz`` to an API (open: ``webapi.auth.OPEN_PATHS``)."""
        app.router.routes.extend(self.routes())


@contextlib.asynccontextmanager
async def serve(
    probes: Probes, *, host: str, port: int | None, metrics: Scrape | None = None
) -> AsyncIterator[str | None]:
    """Serve ``probes`` on ``host:port`` for the block (not at all when ``port`` is None),
    and ``metrics`` on ``/metrics`` behind the scrape token (``webapi.exposition``);
    the base URL."""
    if port is None:
        yield None
        return
    app: Any = probes.app()
    grants = scrape_grants() if metrics is not None else ()
    if metrics is not None and grants:
        app.router.routes.append(metrics.route())
        app = BearerAuth(app, grants=grants, realm=probes.service)
    elif metrics is not None:
        log.info("%s: no /metrics (set BH_METRICS_TOKEN to serve them)", probes.service)
    async with serving(app, host=host, port=port) as url:
        log.info("%s: probes on %s/livez and /readyz", probes.service, url)
        yield url


async def until_stopped(stop: asyncio.Event, running: asyncio.Task[None]) -> None:
    """Until a signal sets ``stop`` or the service's main task ends (then its error, if
    any, is raised where the caller awaits ``running``): a process whose loop died exits
    instead of answering probes as dead forever."""
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
