"""Serving the Hands API: its settings, and ``serve_api`` (uvicorn until SIGINT/SIGTERM).

The API opens the same store, bus and sandbox as a Hands instance on this host, with an
executor of its own (cancel and verify act through it). With ``consume`` it also runs
the dispatch consumer in the same process — one process per Hands host, whose
``/metrics`` then covers every operation it ran.

It refuses to start without a token: ``BH_HANDS_API_TOKEN`` (one unscoped token of at
least ``webapi.auth.MIN_TOKEN_LENGTH`` characters) and/or ``BH_HANDS_API_TOKENS_FILE``
(a 0600 JSON file of scoped tokens, ``webapi.auth``), read from the environment only,
never from a command line (where ``ps`` would show it).
"""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import AsyncExitStack
from functools import partial
from typing import Annotated, Final

import typer
from pydantic import Field, ValidationError

from bus import Bus, BusSettings
from contracts import BrainhandsError, InvalidInput
from contracts.model import Frozen
from contracts.tool import ResultEvent
from hands.app import make_sandbox
from hands.executor import Executor
from hands.service import ConsumerSettings, HandsService, publisher
from hands.settings import HandsSettings
from hands.workspace.flow import WorkspaceFlow
from runtime.cancellation import cancel_and_wait
from runtime.logs import configure_logging
from runtime.tracing import setup_tracing
from session_store import open_store
from webapi import server as web
from webapi.auth import Grant, grants_from_env
from webapi.limits import DEFAULT_MAX_BODY_BYTES, MIN_MAX_BODY_BYTES

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 8470


class ApiSettings(Frozen):
    hands: HandsSettings
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    #: the tokens and their scopes (``webapi.auth.grants_from_env``)
    tokens: tuple[Grant, ...] = Field(min_length=1)
    #: request bodies over this many bytes are refused unread (413)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=MIN_MAX_BODY_BYTES)
    #: connect to NATS: cancellations reach every Hands, ``/metrics`` shows queue depth
    bus: bool = True
    #: also consume dispatches in this process (needs the bus)
    consume: bool = False

    @classmethod
    def from_env(
        cls,
        *,
        host: str | None = None,
        port: int | None = None,
        bus: bool | None = None,
        consume: bool | None = None,
        **hands: object,
    ) -> ApiSettings:
        """Settings from ``BH_HANDS_API_*`` (and the Hands' ``BH_*``); arguments win."""
        env = os.environ
        tokens = grants_from_env("BH_HANDS_API", "Hands API")
        values: dict[str, object] = {
            "hands": HandsSettings.from_env(**hands),
            "tokens": tokens,
            "host": host or env.get("BH_HANDS_API_HOST") or "127.0.0.1",
            "port": port if port is not None else env.get("BH_HANDS_API_PORT") or DEFAULT_PORT,
            "max_body_bytes": env.get("BH_HANDS_API_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES,
            "bus": bus if bus is not None else True,
            "consume": consume if consume is not None else _flag(env.get("BH_HANDS_API_CONSUME")),
        }
        try:
            settings = cls.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise InvalidInput(f"API setting {field} is invalid: {first['msg']}") from None
        if settings.consume and not settings.bus:
            raise InvalidInput("consuming dispatches needs the bus; drop --no-bus or --consume")
        return settings


async def serve_api(settings: ApiSettings) -> None:
    """Open store, bus and sandbox, serve until SIGINT/SIGTERM, close everything."""
    hands = settings.hands
    async with AsyncExitStack() as resources:
        store = await open_store(hands.store_url)
        resources.push_async_callback(store.close)
        bus: Bus | None = None
        if settings.bus:
            bus = await Bus.connect(
                BusSettings(url=hands.nats_url, namespace=hands.namespace),
                name=f"{hands.executor_id}:api",
            )
            resources.push_async_callback(bus.close)
        else:
            log.warning("no bus: cancellations reach only this host's containers")
        sandbox = await make_sandbox(hands, store, resources)
        # The web stack is imported only to serve (``bh`` stays quick to start).
        from hands.api.app import create_app
        from hands.metrics import HandsMetrics
        from webapi.probes import Check, Probes, unready_limit

        metrics = HandsMetrics()
        executor = Executor(
            store=store,
            sandbox=sandbox,
            publish=publisher(bus) if bus is not None else _unannounced,
            # an id of its own: a query claim of the API's is told from a run of the
            # Hands beside it (an attempt of theirs is never taken for one that is over)
            executor_id=f"{hands.executor_id}:api",
            metrics=metrics,
            workspaces=WorkspaceFlow.of(
                store, hands.workspace_root, cache_bytes=hands.workspace_cache_bytes
            ),
        )
        app = create_app(
            store=store,
            executor=executor,
            sandbox=sandbox,
            bus=bus,
            tokens=settings.tokens,
            metrics=metrics,
            max_body_bytes=settings.max_body_bytes,
            caps=hands.caps,
        )
        checks: dict[str, Check] = {"store": store.backend.check, "engine": sandbox.check}
        if bus is not None:
            checks["nats"] = bus.check
        probes = Probes("hands-api", checks, unready_limit=unready_limit())
        probes.mount(app)
        server = web.server(app, host=settings.host, port=settings.port)
        consumer: asyncio.Task[None] | None = None
        service: HandsService | None = None
        if settings.consume and bus is not None:
            service = HandsService(bus=bus, executor=executor, settings=_consumer(hands))
            consumer = asyncio.create_task(service.run())
            # A consumer that died takes the API down with it (its error is raised below).
            consumer.add_done_callback(lambda _: setattr(server, "should_exit", True))
        try:
            stopping = partial(setattr, server, "should_exit", True)
            with web.stop_on_signals(server):
                async with probes.watching(stopping):  # unready too long: stop as on a signal
                    await server.serve()
        finally:
            if service is not None and consumer is not None:
                await service.shutdown()
                for error in await cancel_and_wait(consumer):
                    raise error
    probes.exit_if_expired()


def serve_command(
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default: BH_HANDS_API_HOST, else 127.0.0.1)"),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=f"Port (default: BH_HANDS_API_PORT, else {DEFAULT_PORT})")
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Session Store URL (default: BH_STORE_URL)")
    ] = None,
    nats: Annotated[str | None, typer.Option(help="NATS URL (default: BH_NATS_URL)")] = None,
    sandbox: Annotated[
        str | None, typer.Option(help="docker (default) or process (NOT isolated)")
    ] = None,
    bus: Annotated[
        bool, typer.Option("--bus/--no-bus", help="Connect to NATS (cancel broadcast, queue)")
    ] = True,
    consume: Annotated[
        bool | None,
        typer.Option(
            "--consume/--no-consume", help="Also run dispatches (default: BH_HANDS_API_CONSUME)"
        ),
    ] = None,
) -> None:
    """Serve the Hands HTTP API; tokens come from BH_HANDS_API_TOKEN(S_FILE) only."""
    configure_logging("hands-api")
    setup_tracing("hands-api")
    try:
        settings = ApiSettings.from_env(
            host=host,
            port=port,
            bus=bus,
            consume=consume,
            store_url=store,
            nats_url=nats,
            sandbox=sandbox,
        )
        asyncio.run(serve_api(settings))
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None


def _consumer(hands: HandsSettings) -> ConsumerSettings:
    return ConsumerSettings(
        concurrency=hands.concurrency,
        ack_wait=hands.ack_wait,
        max_deliver=hands.max_deliver,
        reap_every=hands.reap_every,
    )


async def _unannounced(event: ResultEvent) -> None:
    """Without a bus, results are only in the store (the truth); the Brains' reconciler
    finds them there."""


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


if __name__ == "__main__":
    typer.run(serve_command)
