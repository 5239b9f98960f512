"""``python -m hands`` (also ``bh hands``): run a Hands instance until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from contracts import BrainhandsError
from hands.app import open_hands
from hands.settings import HandsSettings
from runtime.cancellation import cancel_and_wait
from runtime.cli import run as run_command
from runtime.logs import configure_logging
from runtime.tracing import setup_tracing
from webapi.exposition import Scrape
from webapi.probes import ProbeHost, ProbePort, Probes, serve, unready_limit, until_stopped

app = typer.Typer(no_args_is_help=False, add_completion=False)


@app.command()
def run(
    store: Annotated[
        str | None, typer.Option(help="Session Store URL (default: BH_STORE_URL)")
    ] = None,
    nats: Annotated[str | None, typer.Option(help="NATS URL (default: BH_NATS_URL)")] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="operations at once (default: BH_HANDS_CONCURRENCY, else 4)"),
    ] = None,
    sandbox: Annotated[
        str | None, typer.Option(help="docker (default) or process (NOT isolated)")
    ] = None,
    probe_port: ProbePort = None,
    probe_host: ProbeHost = "127.0.0.1",
) -> None:
    """Pull dispatched operations from JetStream and run them in sandboxes."""
    configure_logging("hands")
    setup_tracing("hands")
    try:
        settings = HandsSettings.from_env(
            store_url=store, nats_url=nats, concurrency=concurrency, sandbox=sandbox
        )
        asyncio.run(_serve(settings, probe_host, probe_port))
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None


async def _serve(settings: HandsSettings, probe_host: str, probe_port: int | None) -> None:
    async with open_hands(settings) as service:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        running = asyncio.create_task(service.run())
        probes = Probes(
            "hands",
            service.checks(),
            alive=lambda: not running.done(),
            unready_limit=unready_limit(),
        )
        executor = service.executor
        metrics = Scrape(
            executor.metrics.registry,
            lambda: executor.metrics.refresh(sandbox=executor.sandbox, bus=service.bus),
        )
        async with serve(probes, host=probe_host, port=probe_port, metrics=metrics):
            await until_stopped(stop, running, probes)
        await service.shutdown()
        for error in await cancel_and_wait(running):
            raise error
        probes.exit_if_expired()


if __name__ == "__main__":
    run_command(app)
