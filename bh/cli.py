"""The ``bh`` command: one entry point for operators and developers."""

from __future__ import annotations

from typing import Annotated

import typer

from bh import (
    chaos,
    demo,
    devstack,
    doctor,
    images_commands,
    init_command,
    ops_commands,
    session_commands,
    store_commands,
    system,
    tools_commands,
)
from brain import __main__ as brain_main
from contracts import BrainhandsError
from hands import __main__ as hands_main
from hands import api_server
from runtime.build import build_id
from runtime.cli import Commands
from scheduler import __main__ as scheduler_main
from session_api import server as session_api_server

app = typer.Typer(
    cls=Commands,
    help="brainhands: durable Brain/Hands execution for long-running agent tasks.",
    no_args_is_help=True,
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"brainhands {build_id()}")  # the version, or the image's build id
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """brainhands: durable Brain/Hands execution for long-running agent tasks."""


app.add_typer(devstack.app, name="dev", help="Start and stop local infrastructure.")
app.add_typer(store_commands.app, name="store")
app.add_typer(images_commands.app, name="images")
app.add_typer(ops_commands.app, name="ops")
app.add_typer(tools_commands.app, name="tools")
app.add_typer(session_commands.app)  # bh submit | sessions | show | watch | cancel | fork
app.command(name="demo")(demo.demo)
app.command(name="up")(system.up)
app.command(name="init")(init_command.init)  # a deployment's one-shot init job
app.command(name="chaos")(chaos.chaos)
app.command(name="doctor")(doctor.doctor)
app.command(name="down")(system.down)
app.command(name="ps")(system.status)
app.command(name="hands", help="Run a Hands instance (also: python -m hands).")(hands_main.run)
app.command(name="brain", help="Run a Brain worker (also: python -m brain worker).")(
    brain_main.worker
)
app.command(name="scheduler", help="Run the scheduler (also: python -m scheduler).")(
    scheduler_main.run
)
app.command(name="hands-api", help="Serve the Hands HTTP API (token from BH_HANDS_API_TOKEN).")(
    api_server.serve_command
)


app.command(
    name="session-api", help="Serve the Session HTTP API (token from BH_SESSION_API_TOKEN)."
)(session_api_server.serve_command)


def main() -> None:
    """``bh``: a project error that a command did not handle is one line on stderr
    (``code: message``) and exit status 2, as the commands that run their own say it —
    a traceback is for bugs, not for a refusal the user can act on."""
    try:
        app()
    except BrainhandsError as error:
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
