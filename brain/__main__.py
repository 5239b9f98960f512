"""``python -m brain run``: one session to idle in this process (embedded);
``python -m brain worker`` (also ``bh brain``): a long-running Brain driving the sessions
the scheduler wakes, under fenced leases."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Annotated

import typer
from redis.asyncio import Redis

from brain.model.openai import DEFAULT_CONNECTIONS
from brain.model.settings import ModelSettings
from brain.service import BrainService
from brain.worker import BrainSettings, WorkerSettings, build, run_worker
from bus import BusSettings
from contracts import BrainhandsError
from contracts.question import ApprovalRule
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.ratelimit import ModelLimits, endpoint_key
from coordination.routes import Routes, SessionRouter
from coordination.wakes import RQWakes
from runtime.cli import Commands
from runtime.logs import configure_logging
from runtime.tracing import setup_tracing
from webapi.exposition import Scrape
from webapi.probes import (
    Check,
    ProbeHost,
    ProbePort,
    Probes,
    serve,
    unready_limit,
    until_stopped,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, cls=Commands)

Approve = Annotated[
    list[str] | None,
    typer.Option(
        envvar="BH_APPROVE",
        help="a tool whose calls need approval, or an approval rule as JSON "
        '({"tool", "when", "queue", "within_s", "on_deadline", "escalate_to"}); repeatable',
    ),
]

#: the deployment gives these in the environment (the service table: a ConfigMap key on
#: Kubernetes, a setting of compose.yaml), whitespace-separated, so a user's own agent
#: code needs no change of the service's command (docs/deploy-own-agent.md)
Plugins = Annotated[
    list[str] | None,
    typer.Option(
        envvar="BH_BRAIN_PLUGINS",
        help="a plugin to load, module:function; repeatable (the variable: several, "
        "separated by spaces)",
    ),
]
Sandboxed = Annotated[
    list[str] | None,
    typer.Option(
        envvar="BH_BRAIN_SANDBOXED",
        help="a registered tool to run on the Hands; repeatable (the variable: several, "
        "separated by spaces)",
    ),
]


def _limits(settings: BrainSettings, client: Redis, prefix: str) -> ModelLimits | None:
    model = settings.model
    if model is None or not (model.requests_per_minute or model.tokens_per_minute):
        return None
    return ModelLimits(
        client,
        endpoint_key(model.base_url, model.model),
        requests_per_minute=model.requests_per_minute,
        tokens_per_minute=model.tokens_per_minute,
        prefix=prefix,
    )


def _rules(given: list[str] | None) -> tuple[ApprovalRule, ...]:
    try:
        return tuple(ApprovalRule.parse(text) for text in given or ())
    except ValueError as error:  # pydantic's ValidationError is one
        raise typer.BadParameter(f"--approve: {error}") from None


@app.callback()
def main() -> None:
    """Brain worker commands."""


@app.command()
def run(
    store: Annotated[str, typer.Option(envvar="BH_STORE_URL", help="Session Store URL")],
    session: Annotated[str, typer.Option(help="session id")],
    plugin: Plugins = None,
    sandboxed: Sandboxed = None,
    nats: Annotated[str | None, typer.Option(envvar="BH_NATS_URL", help="NATS URL")] = None,
    namespace: Annotated[str, typer.Option(envvar="BH_NAMESPACE", help="bus namespace")] = "bh",
    approve: Approve = None,
) -> None:
    """Drive SESSION until it is finished or cannot move by itself; print the report."""
    setup_tracing("brain")
    model = ModelSettings.from_env() if os.environ.get("BH_MODEL_BASE_URL") else None
    settings = WorkerSettings(
        store_url=store,
        session_id=session,
        plugins=tuple(plugin or ()),
        model=model,
        bus=BusSettings(url=nats, namespace=namespace) if nats else None,
        sandboxed=tuple(sandboxed or ()),
        approvals=_rules(approve),
    )
    try:
        report = asyncio.run(run_worker(settings))
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None
    sys.stdout.write(report.model_dump_json() + "\n")


@app.command()
def worker(
    store: Annotated[str, typer.Option(envvar="BH_STORE_URL", help="Session Store URL")],
    redis_url: Annotated[
        str, typer.Option("--redis", envvar="BH_REDIS_URL", help="Redis (leases, wakes)")
    ],
    plugin: Plugins = None,
    sandboxed: Sandboxed = None,
    nats: Annotated[str | None, typer.Option(envvar="BH_NATS_URL", help="NATS URL")] = None,
    namespace: Annotated[str, typer.Option(envvar="BH_NAMESPACE", help="bus/Redis prefix")] = "bh",
    concurrency: Annotated[int, typer.Option(help="sessions driven at once")] = 8,
    lease_seconds: Annotated[float, typer.Option(help="lease TTL (extended while driving)")] = 10,
    redis_connections: Annotated[
        int,
        typer.Option(
            envvar="BH_BRAIN_REDIS_CONNECTIONS",
            min=4,
            help="connections the slots share for leases, routes and wakes",
        ),
    ] = 64,
    probe_port: ProbePort = None,
    probe_host: ProbeHost = "127.0.0.1",
    approve: Approve = None,
) -> None:
    """Drive the sessions the scheduler wakes, many at once, until SIGINT/SIGTERM."""
    configure_logging("brain")
    setup_tracing("brain")
    model = ModelSettings.from_env() if os.environ.get("BH_MODEL_BASE_URL") else None
    if model is not None and model.max_connections is None:  # a request in flight per slot
        pool = max(concurrency, DEFAULT_CONNECTIONS)
        model = model.model_copy(update={"max_connections": pool})
    settings = BrainSettings(
        store_url=store,
        plugins=tuple(plugin or ()),
        model=model,
        bus=BusSettings(url=nats, namespace=namespace) if nats else None,
        sandboxed=tuple(sandboxed or ()),
        approvals=_rules(approve),
    )
    try:
        ttl = timedelta(seconds=lease_seconds)
        probes = (probe_host, probe_port)
        asyncio.run(
            _serve(settings, redis_url, namespace, concurrency, ttl, probes, redis_connections)
        )
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None


async def _serve(
    settings: BrainSettings,
    redis_url: str,
    prefix: str,
    concurrency: int,
    ttl: timedelta,
    probe_at: tuple[str, int | None],
    redis_connections: int = 64,
) -> None:
    async with AsyncExitStack() as resources:
        # leases, routes and wakes of every slot share it: short commands, so a bounded
        # pool that a drive waits on serves thousands of slots (a pool sized for the
        # slots opened about one connection per concurrent drive: 1,072 for 1,000)
        name = f"brain-{os.getpid()}"  # CLIENT LIST: this Brain's connections
        client = redis_client.connect_bounded(redis_url, connections=redis_connections, name=name)
        resources.push_async_callback(client.aclose)
        # lease extensions on a few connections of their own: a lease being kept never
        # queues behind a burst of acquisitions (it would lapse unproven)
        keeping = redis_client.connect_bounded(redis_url, connections=8, name=name)
        resources.push_async_callback(keeping.aclose)
        built = await build(settings, resources, limits=_limits(settings, client, prefix))
        routes = Routes(client, prefix=prefix)
        wakes = RQWakes(redis_url, prefix=prefix, router=SessionRouter(built.store, routes))
        resources.callback(wakes.close)
        service = BrainService(
            runner=built.runner,
            leases=RedisLeases(client, prefix=prefix, keeping=keeping),
            wakes=wakes,
            redis_url=redis_url,
            concurrency=concurrency,
            lease_ttl=ttl,
            routes=routes,
            model=settings.model.model if settings.model is not None else None,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        running = asyncio.create_task(service.run())
        checks: dict[str, Check] = {"store": built.store.backend.check, "redis": client.ping}
        if built.bus is not None:
            checks["nats"] = built.bus.check
        checks["wake_route"] = service.holds_its_route
        probes = Probes(
            "brain", checks, alive=lambda: not running.done(), unready_limit=unready_limit()
        )
        metrics = Scrape(service.metrics.registry)
        async with serve(probes, host=probe_at[0], port=probe_at[1], metrics=metrics):
            await until_stopped(stop, running, probes)
        await service.shutdown()  # running drives end; leases are handed back
        await running
    probes.exit_if_expired()


if __name__ == "__main__":
    app()
