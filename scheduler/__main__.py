"""``python -m scheduler`` (also ``bh scheduler``): results → wakes, timers, reconciler."""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Annotated

import redis.asyncio
import typer

from bus import Bus, BusSettings
from contracts import BrainhandsError
from coordination.leases import RedisLeases
from coordination.routes import Routes, SessionRouter
from coordination.wakes import RQWakes
from scheduler.service import Scheduler, SchedulerSettings
from session_store import open_store

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
        float, typer.Option(help="reconciler period; 0 turns it off")
    ] = 30,
) -> None:
    """Wake Brains for results, due timers and whatever Redis or NATS lost."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    every = timedelta(seconds=reconcile_seconds) if reconcile_seconds > 0 else None
    try:
        asyncio.run(
            _serve(store, redis_url, nats, namespace, SchedulerSettings(reconcile_every=every))
        )
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None


async def _serve(
    store_url: str, redis_url: str, nats: str | None, prefix: str, settings: SchedulerSettings
) -> None:
    async with AsyncExitStack() as resources:
        store = await open_store(store_url)
        resources.push_async_callback(store.close)
        bus = None
        if nats:
            bus = await Bus.connect(BusSettings(url=nats, namespace=prefix), name="scheduler")
            resources.push_async_callback(bus.close)
        client = redis.asyncio.Redis.from_url(redis_url)
        resources.push_async_callback(client.aclose)
        wakes = RQWakes(
            redis_url, prefix=prefix, router=SessionRouter(store, Routes(client, prefix=prefix))
        )
        resources.callback(wakes.close)
        scheduler = Scheduler(
            store=store,
            bus=bus,
            wakes=wakes,
            leases=RedisLeases(client, prefix=prefix),
            settings=settings,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        running = asyncio.create_task(scheduler.run())
        await stop.wait()
        await scheduler.shutdown()
        await running


if __name__ == "__main__":
    app()
