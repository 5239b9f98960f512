"""Serving the Session API: its settings, and ``serve_api`` (uvicorn until SIGINT/SIGTERM).

It refuses to start without a token: ``BH_SESSION_API_TOKEN`` (one unscoped token of at least
``webapi.auth.MIN_TOKEN_LENGTH`` characters) and/or ``BH_SESSION_API_TOKENS_FILE`` (a 0600
JSON file of scoped tokens, ``webapi.auth``), read from the environment only, never
from a command line (where ``ps`` would show it). Wakes come from a factory the caller
passes (the scheduler's RQ queue); without one, accepted input waits for a scheduler
to find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from functools import partial
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

import typer
from pydantic import AfterValidator, Field, ValidationError

from contracts import BrainhandsError, InvalidInput
from contracts.model import Frozen
from coordination import WakeQueue, redis_client
from runtime.logs import configure_logging
from runtime.tracing import setup_tracing
from session_store import open_store
from webapi import server as web
from webapi.auth import Grant, grants_from_env
from webapi.limits import DEFAULT_MAX_BODY_BYTES, MIN_MAX_BODY_BYTES

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 8460

#: Opens the wake queue for a server's settings, and closes it when the server stops.
WakesFactory = Callable[["SessionApiSettings"], AbstractAsyncContextManager[WakeQueue]]


def _public_url(url: str) -> str:
    """``scheme://host[:port]`` of http(s), nothing after it: the console's pages are
    served at ``/console`` of that origin."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    if parts.path not in {"", "/"} or parts.query or parts.fragment or parts.username:
        raise ValueError(
            f"{url!r} must be an origin only, e.g. https://console.example.com (the console "
            "is served at /console of it: a path prefix is not supported)"
        )
    return f"{parts.scheme}://{parts.netloc}"


class SessionApiSettings(Frozen):
    store_url: str = Field(min_length=1)
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    #: the tokens and their scopes (``webapi.auth.grants_from_env``)
    tokens: tuple[Grant, ...] = Field(min_length=1)
    #: request bodies over this many bytes are refused unread (413)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=MIN_MAX_BODY_BYTES)
    #: the origin browsers reach the API at, when a proxy in front of it terminates TLS
    #: (the console's cookie is ``Secure`` and its forms' origin checked by this one)
    public_url: Annotated[str, AfterValidator(_public_url)] | None = None
    #: event streams open at once in this process and per token (None: the
    #: ``session_api.stream.StreamSettings`` defaults, 256 and 16)
    max_streams: int | None = Field(default=None, ge=1)
    max_streams_per_token: int | None = Field(default=None, ge=1)

    @classmethod
    def from_env(
        cls, *, host: str | None = None, port: int | None = None, store_url: str | None = None
    ) -> SessionApiSettings:
        """Settings from ``BH_SESSION_API_*`` and ``BH_STORE_URL``; arguments win."""
        env = os.environ
        tokens = grants_from_env("BH_SESSION_API", "Session API")
        url = store_url or env.get("BH_STORE_URL", "")
        if not url:
            raise InvalidInput("the Session API needs a store: set BH_STORE_URL or --store")
        values: dict[str, object] = {
            "store_url": url,
            "tokens": tokens,
            "host": host or env.get("BH_SESSION_API_HOST") or "127.0.0.1",
            "port": port if port is not None else env.get("BH_SESSION_API_PORT") or DEFAULT_PORT,
            "max_body_bytes": env.get("BH_SESSION_API_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES,
            "public_url": env.get("BH_SESSION_API_PUBLIC_URL") or None,
            "max_streams": env.get("BH_SESSION_API_MAX_STREAMS") or None,
            "max_streams_per_token": env.get("BH_SESSION_API_MAX_STREAMS_PER_TOKEN") or None,
        }
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise InvalidInput(f"API setting {field} is invalid: {first['msg']}") from None


async def serve_api(settings: SessionApiSettings, *, wakes: WakesFactory | None = None) -> None:
    """Open the store (and the wake queue), serve until SIGINT/SIGTERM, close them."""
    async with AsyncExitStack() as resources:
        store = await open_store(settings.store_url)
        resources.push_async_callback(store.close)
        queue: WakeQueue | None = None
        if wakes is not None:
            queue = await resources.enter_async_context(wakes(settings))
        # The web stack is imported only to serve (``bh`` stays quick to start).
        from coordination.wakes import RQWakes
        from session_api.app import create_app, stop_streams
        from session_api.stream import StreamSettings
        from webapi.probes import Check, Probes, unready_limit

        caps = {
            "max_open": settings.max_streams,
            "max_open_per_token": settings.max_streams_per_token,
        }
        app = create_app(
            store=store,
            wakes=queue,
            tokens=settings.tokens,
            max_body_bytes=settings.max_body_bytes,
            backlog=queue.backlog if isinstance(queue, RQWakes) else None,
            brains=queue.brains if isinstance(queue, RQWakes) else None,
            streams=StreamSettings(**{k: v for k, v in caps.items() if v is not None}),
            public_url=settings.public_url,
        )
        checks: dict[str, Check] = {"store": store.backend.check}
        if queue is not None:
            checks["redis"] = queue.check
        probes = Probes("session-api", checks, unready_limit=unready_limit())
        probes.mount(app)
        server = web.server(app, host=settings.host, port=settings.port)
        with web.stop_on_signals(server, lambda: stop_streams(app)):
            # readiness failing past its limit stops the server as a signal does
            async with probes.watching(partial(_stop, server, app)):
                await server.serve()
    probes.exit_if_expired()


def _stop(server: Any, app: Any) -> None:
    """Stop serving as a signal does: the event streams first."""
    from session_api.app import stop_streams

    stop_streams(app)
    server.should_exit = True


def serve_command(
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default: BH_SESSION_API_HOST, else 127.0.0.1)"),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=f"Port (default: BH_SESSION_API_PORT, else {DEFAULT_PORT})")
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Session Store URL (default: BH_STORE_URL)")
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis", envvar="BH_REDIS_URL", help="Redis: wake jobs (RQ)")
    ] = None,
    namespace: Annotated[str, typer.Option(envvar="BH_NAMESPACE", help="Redis prefix")] = "bh",
) -> None:
    """Serve the Session HTTP API; tokens come from BH_SESSION_API_TOKEN(S_FILE) only."""
    configure_logging("session-api")
    setup_tracing("session-api")
    try:
        settings = SessionApiSettings.from_env(host=host, port=port, store_url=store)
        wakes = None if not redis_url else rq_wakes(redis_url, namespace)
        asyncio.run(serve_api(settings, wakes=wakes))
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None


def rq_wakes(redis_url: str, prefix: str) -> WakesFactory:
    """Wake jobs on RQ (``coordination.wakes``) for every accepted submission or cancel."""

    @contextlib.asynccontextmanager
    async def open_wakes(settings: SessionApiSettings) -> AsyncIterator[WakeQueue]:

        from coordination.routes import Routes, SessionRouter
        from coordination.wakes import RQWakes
        from session_store import open_store

        store = await open_store(settings.store_url)
        client = redis_client.connect(redis_url)
        router = SessionRouter(store, Routes(client, prefix=prefix))
        wakes = RQWakes(redis_url, prefix=prefix, router=router)
        try:
            yield wakes
        finally:
            wakes.close()
            await client.aclose()
            await store.close()

    return open_wakes


def main() -> None:
    typer.run(serve_command)


if __name__ == "__main__":
    main()
