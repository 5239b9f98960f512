"""Liveness and readiness of a service process: ``GET /livez`` and ``GET /readyz``.

``/livez`` answers 200 while the process's event loop serves requests and its main task
has not ended (``alive``): a liveness probe restarts a process that answers 503 or
nothing. ``/readyz`` runs the service's checks (each an awaitable that raises when its
dependency does not answer: the store, Redis, NATS, the engine, a Brain's wake route,
a Hands' consumer) at once, each bounded by ``timeout``, and answers 200 when all pass,
503 with the failing ones otherwise; a readiness probe takes the process out of
traffic, it does not restart it. Results are kept for ``cache`` seconds so a burst of
probes costs one round of checks.

A process whose readiness keeps failing is one that cannot heal itself (a connection
stuck in a state its client does not leave, a loop that stopped): after ``unready_limit``
seconds (90 by default, ``BH_UNREADY_LIMIT_S``; 0: never) of failing without a pass,
``/livez`` answers 503 and the process stops and exits with ``EXIT_UNREADY`` (3), so
its supervisor (compose's restart policy, Kubernetes) starts a fresh one. A watch
evaluates readiness every ``watch_every`` seconds even when nobody probes (``watching``;
``serve`` runs it for the workers, the APIs around their server), so the limit holds
without an orchestrator; a stop that hangs past ``exit_grace`` ends in ``os._exit``.

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
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import typer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contracts import InvalidInput
from runtime.build import build_id
from runtime.cancellation import cancel_and_wait
from webapi.auth import BearerAuth
from webapi.exposition import Scrape, scrape_grants
from webapi.server import serving

log = logging.getLogger(__name__)

PATHS = frozenset({"/livez", "/readyz"})

Check = Callable[[], Awaitable[object]]
#: the exit status of a process whose readiness failed longer than its limit
EXIT_UNREADY: Final = 3
#: readiness failing this long (seconds) ends the process, unless configured otherwise
UNREADY_LIMIT_S: Final = 90.0
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
    #: seconds of readiness failing without a pass that end the process (None: never)
    unready_limit: float | None = UNREADY_LIMIT_S
    #: how often the watch evaluates readiness when nobody probes
    watch_every: float = 5.0
    #: how long the stop after the limit may take before the process exits at once
    #: (None: it waits; for tests that run a watch in their own process)
    exit_grace: float | None = 30.0
    #: set once readiness failed past ``unready_limit``: the process must end
    expired: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _last: tuple[float, dict[str, str]] | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _unready_since: float | None = field(default=None, init=False)

    async def failing(self) -> dict[str, str]:
        """The checks that fail now, with their error's class ("timeout" when slow)."""
        async with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.cache:
                return self._last[1]
            names = list(self.checks)
            outcomes = await asyncio.gather(*(self._one(name) for name in names))
            failing = {name: why for name, why in zip(names, outcomes, strict=True) if why}
            self._last = (time.monotonic(), failing)
            self._judge(failing)
            return failing

    def _judge(self, failing: Mapping[str, str]) -> None:
        """Keep when readiness began failing; past ``unready_limit``, expire."""
        now = time.monotonic()
        if not failing:
            self._unready_since = None
            return
        if self._unready_since is None:
            self._unready_since = now
        limit = self.unready_limit
        if limit and now - self._unready_since >= limit and not self.expired.is_set():
            log.error(
                "%s: not ready for %.0f s (%s): stopping, so that a fresh process takes over",
                self.service,
                now - self._unready_since,
                ", ".join(f"{name}: {why}" for name, why in failing.items()),
            )
            self.expired.set()

    @contextlib.asynccontextmanager
    async def watching(self, on_expiry: Callable[[], None] = lambda: None) -> AsyncIterator[None]:
        """Evaluate readiness every ``watch_every`` for the block; once it expired,
        ``on_expiry()`` (stop the service: leave the block, then ``exit_if_expired``)."""
        watch = asyncio.create_task(self._watch(on_expiry))
        try:
            yield
        finally:
            await cancel_and_wait(watch)

    async def _watch(self, on_expiry: Callable[[], None]) -> None:
        """A round of checks when none ran for ``watch_every`` (an orchestrator probing
        as often costs nothing more)."""
        while not self.expired.is_set():
            since = time.monotonic() - self._last[0] if self._last else self.watch_every
            if since >= self.watch_every:
                await self.failing()
            else:
                await asyncio.sleep(self.watch_every - since)
        on_expiry()
        if self.exit_grace is not None:  # a stop stuck on a dead connection ends here
            asyncio.get_running_loop().call_later(self.exit_grace, os._exit, EXIT_UNREADY)

    def exit_if_expired(self) -> None:
        """End the process with ``EXIT_UNREADY`` if readiness failed past the limit."""
        if self.expired.is_set():
            raise SystemExit(EXIT_UNREADY)

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
        if self.expired.is_set():
            return JSONResponse({**self._who(), "status": "unready_too_long"}, 503)
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
    the base URL. Readiness is watched either way (``until_stopped`` returns once it
    expired)."""
    async with probes.watching(), _served(probes, host=host, port=port, metrics=metrics) as url:
        yield url


@contextlib.asynccontextmanager
async def _served(
    probes: Probes, *, host: str, port: int | None, metrics: Scrape | None
) -> AsyncIterator[str | None]:
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


async def until_stopped(
    stop: asyncio.Event, running: asyncio.Task[None], probes: Probes | None = None
) -> None:
    """Until a signal sets ``stop``, the service's main task ends (then its error, if
    any, is raised where the caller awaits ``running``) or ``probes`` expired (then the
    caller stops the service and calls ``exit_if_expired``): a process whose loop died,
    or that cannot get ready again, exits instead of answering probes forever."""
    waits = {asyncio.create_task(stop.wait())}
    if probes is not None:
        waits.add(asyncio.create_task(probes.expired.wait()))
    await asyncio.wait({running, *waits}, return_when=asyncio.FIRST_COMPLETED)
    await cancel_and_wait(*waits)


def unready_limit(env: Mapping[str, str] = os.environ) -> float | None:
    """``BH_UNREADY_LIMIT_S`` (seconds; 0 or less: never), read by each entry point."""
    text = env.get("BH_UNREADY_LIMIT_S", "").strip()
    if not text:
        return UNREADY_LIMIT_S
    try:
        seconds = float(text)
    except ValueError:
        raise InvalidInput(
            f"BH_UNREADY_LIMIT_S must be a number of seconds, not {text!r}"
        ) from None
    return seconds if seconds > 0 else None
