"""``python -m scheduler`` (also ``bh scheduler``): results → wakes, timers, reconciler,
workspace collection."""

from __future__ import annotations

import asyncio
import signal
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Annotated

import typer

from contracts import BrainhandsError
from coordination import redis_client
from runtime.cli import run as run_command
from runtime.logs import configure_logging
from runtime.tracing import setup_tracing
from scheduler.assembly import Connections, build
from scheduler.metrics import SchedulerMetrics
from scheduler.service import SchedulerSettings
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

app = typer.Typer(add_completion=False)


@app.command()
def run(
    store: Annotated[str, typer.Option(envvar="BH_STORE_URL", help="Session Store URL")],
    redis_url: Annotated[
        str, typer.Option("--redis", envvar="BH_REDIS_URL", help="Redis (leases, wakes)")
    ],
    nats: Annotated[str | None, typer.Option(envvar="BH_NATS_URL", help="NATS URL")] = None,
    namespace: Annotated[str, typer.Option(envvar="BH_NAMESPACE", help="bus/Redis prefix")] = "bh",
    reconcile_seconds: Annotated[
        float, typer.Option(help="period of the audit of every active session; 0: off")
    ] = 600,
    reissue_seconds: Annotated[
        float,
        typer.Option(help="an open intent is looked at (its dispatch re-issued) this often"),
    ] = 30,
    collect_seconds: Annotated[
        float,
        typer.Option(
            envvar="BH_SCHEDULER_COLLECT_SECONDS",
            min=0,
            help="period of the workspace collection (one scheduler of the fleet); 0: off",
        ),
    ] = 3600,
    workspace_grace_seconds: Annotated[
        float,
        typer.Option(
            envvar="BH_WORKSPACE_GRACE_SECONDS",
            min=0,
            help="a workspace blob a writer touched this recently is never collected",
        ),
    ] = 3600,
    probe_port: ProbePort = None,
    probe_host: ProbeHost = "127.0.0.1",
) -> None:
    """Wake Brains for results, due timers and whatever Redis or NATS lost."""
    configure_logging("scheduler")
    setup_tracing("scheduler")
    every = _period(reconcile_seconds)
    connections = Connections(
        store_url=store,
        redis_url=redis_url,
        nats_url=nats,
        namespace=namespace,
        workspace_grace_seconds=workspace_grace_seconds,
    )
    try:
        asyncio.run(
            _serve(
                connections,
                SchedulerSettings(
                    reconcile_every=every,
                    reissue_after=timedelta(seconds=reissue_seconds),
                    collect_every=_period(collect_seconds),
                    # an intent comes due ``reissue_after`` after its dispatch: looked
                    # at within a sixth of that (at most every 5 s)
                    attend_every=timedelta(seconds=min(5.0, max(0.2, reissue_seconds / 6))),
                ),
                (probe_host, probe_port),
            )
        )
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None


def _period(seconds: float) -> timedelta | None:
    return timedelta(seconds=seconds) if seconds > 0 else None


async def _serve(
    connections: Connections, settings: SchedulerSettings, probe_at: tuple[str, int | None]
) -> None:
    async with AsyncExitStack() as resources:
        scheduler = await build(connections, resources, settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        running = asyncio.create_task(scheduler.run())
        redis = redis_client.connect(connections.redis_url)  # the probes' own client
        resources.push_async_callback(redis.aclose)
        checks: dict[str, Check] = {"store": scheduler.store.backend.check, "redis": redis.ping}
        if scheduler.bus is not None:
            checks["nats"] = scheduler.bus.check
        probes = Probes(
            "scheduler", checks, alive=lambda: not running.done(), unready_limit=unready_limit()
        )
        metrics = SchedulerMetrics(scheduler)
        scrape = Scrape(metrics.registry, metrics.refresh)
        async with serve(probes, host=probe_at[0], port=probe_at[1], metrics=scrape):
            # a signal, or a loop's unexpected error (then re-raised by ``await running``)
            await until_stopped(stop, running, probes)
        await scheduler.shutdown()
        await running
    probes.exit_if_expired()


if __name__ == "__main__":
    run_command(app)
