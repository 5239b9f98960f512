"""``python -m brain run``: run one session to idle in this process (embedded worker)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

import typer

from brain.model.settings import ModelSettings
from brain.worker import WorkerSettings, run_worker
from bus import BusSettings
from contracts import BrainhandsError

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.callback()
def main() -> None:
    """Brain worker commands."""


@app.command()
def run(
    store: Annotated[str, typer.Option(envvar="BH_STORE_URL", help="Session Store URL")],
    session: Annotated[str, typer.Option(help="session id")],
    plugin: Annotated[list[str] | None, typer.Option(help="module:function, repeatable")] = None,
    sandboxed: Annotated[
        list[str] | None, typer.Option(help="registered tool to run on the Hands, repeatable")
    ] = None,
    nats: Annotated[str | None, typer.Option(envvar="BH_NATS_URL", help="NATS URL")] = None,
    namespace: Annotated[str, typer.Option(envvar="BH_NAMESPACE", help="bus namespace")] = "bh",
) -> None:
    """Drive SESSION until it is finished or cannot move by itself; print the report."""
    model = ModelSettings.from_env() if os.environ.get("BH_MODEL_BASE_URL") else None
    settings = WorkerSettings(
        store_url=store,
        session_id=session,
        plugins=tuple(plugin or ()),
        model=model,
        bus=BusSettings(url=nats, namespace=namespace) if nats else None,
        sandboxed=tuple(sandboxed or ()),
    )
    try:
        report = asyncio.run(run_worker(settings))
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise typer.Exit(2) from None
    sys.stdout.write(report.model_dump_json() + "\n")


if __name__ == "__main__":
    app()
