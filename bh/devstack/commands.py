"""``bh dev``: start, stop and inspect the local dev services."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from bh.devstack import catalog, envfile
from bh.devstack.config import DevConfig
from bh.devstack.errors import DevstackError
from bh.devstack.report import Report, table
from bh.devstack.stack import Stack
from bh.devstack.state import StateDir

CORE = ("redis", "nats", "moto")  # required by default; docker is optional unless --require
OPT_IN = ("rgw",)  # started only when --require names it; kept up once started

app = typer.Typer(
    help="Run the local dev services (Redis, NATS JetStream, moto S3/DynamoDB, Docker, and "
    "with --require rgw Ceph's radosgw S3) on 127.0.0.1. Every command is idempotent.",
    no_args_is_help=True,
)

Without = Annotated[
    list[str] | None,
    typer.Option(metavar="SERVICE", help="Do not start this service. Repeatable."),
]
Require = Annotated[
    list[str] | None,
    typer.Option(metavar="SERVICE", help="Fail unless this one is up, e.g. docker. Repeatable."),
]


@app.command()
def up(without: Without = None, require: Require = None) -> None:
    """Start every service not yet running and write <state>/env.

    redis, nats and moto are required; docker is optional unless --require docker; rgw
    starts only with --require rgw, or when an earlier up started it. Exits 1 if a
    required service is not up.
    """
    with _session() as (ui, stack, state):
        skip, extra = _names(stack, without), _names(stack, require)
        if clash := sorted(set(skip) & set(extra)):
            raise DevstackError(f"{', '.join(clash)}: given to both --without and --require")
        skip += [name for name in OPT_IN if name not in extra and not _was_started(stack, name)]
        required = [name for name in (*CORE, *extra) if name not in skip]
        with state.locked():
            reports = stack.up(skip=skip, required=required)
        ui.show(reports, title=f"bh dev up ({state.root})")
        ui.say(f'env written to {state.env_file}; load it with: eval "$(bh dev env)"')
        _exit_if_fatal(reports)


@app.command()
def down() -> None:
    """Stop the services bh dev started; anything it did not start is left running."""
    with _session() as (ui, stack, state):
        with state.locked():
            reports = stack.down()
        ui.show(reports, title="bh dev down")


@app.command()
def status() -> None:
    """Show each service's state. Exits 1 unless redis, nats and moto all answer."""
    with _session() as (ui, stack, _state):
        reports = stack.status(required=CORE)
        ui.show(reports, title="bh dev status")
        _exit_if_fatal(reports)


@app.command()
def restart(
    service: Annotated[str, typer.Argument(help="redis, nats, moto, docker or rgw")],
) -> None:
    """Stop and start one service afresh (moto comes back empty)."""
    with _session() as (ui, stack, state):
        stack.get(service)
        with state.locked():
            report = stack.restart(service)
        ui.show([report], title=f"bh dev restart {service}")
        _exit_if_fatal([report])


@app.command()
def env() -> None:
    """Print `export` lines for the services answering now: eval "$(bh dev env)"."""
    with _session() as (ui, stack, _state):
        exports = stack.exports()
        missing = [r.service for r in stack.status() if not r.up and r.service not in OPT_IN]
        if missing:
            ui.warn(f"# not running, so not exported: {', '.join(missing)} (bh dev up)")
        typer.echo(envfile.render(exports), nl=False)


@dataclass(frozen=True)
class _Ui:
    """Tables and progress on stdout, problems on stderr."""

    out: Console
    err: Console

    @classmethod
    def create(cls) -> _Ui:
        return cls(out=_console(stderr=False), err=_console(stderr=True))

    def say(self, message: str) -> None:
        self.out.print(escape(message))

    def warn(self, message: str) -> None:
        self.err.print(escape(message))

    def show(self, reports: Sequence[Report], *, title: str) -> None:
        self.out.print(table(reports, title=title))
        for report in reports:
            if report.log_tail:
                self.err.print(f"[red]{report.service}[/]: last lines of {report.log_path}:")
                self.err.print(report.log_tail, markup=False)


@contextmanager
def _session() -> Iterator[tuple[_Ui, Stack, StateDir]]:
    """Build the stack from the environment; show a DevstackError without a traceback."""
    ui = _Ui.create()
    try:
        config = DevConfig.from_env(os.environ)
        state = StateDir(config.home)
        services = catalog.services(config, state, ui.say)
        yield ui, Stack(services, state=state, env=os.environ, say=ui.say), state
    except DevstackError as exc:
        ui.err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None


def _console(*, stderr: bool) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 160  # CI logs: rich's 80-column default would fold every path
    return console


def _names(stack: Stack, given: Sequence[str] | None) -> list[str]:
    return [stack.get(name).name for name in given or ()]


def _was_started(stack: Stack, name: str) -> bool:
    """An opt-in service an earlier ``up`` started (its pidfile is there, even if the
    machine restarted since) or that answers: ``up`` keeps it up."""
    service = stack.get(name)
    return service.pid_path.exists() or service.ready()


def _exit_if_fatal(reports: Sequence[Report]) -> None:
    if any(report.fatal for report in reports):
        raise typer.Exit(1)
