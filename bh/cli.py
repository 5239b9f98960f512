"""The ``bh`` command: one entry point for operators and developers."""

from __future__ import annotations

from typing import Annotated, ClassVar

import typer

from runtime.build import build_id
from runtime.cli import Lazy, LazyCommands

_SESSION_COMMANDS = (
    *("submit", "budget", "input-policy", "answer", "approve", "deny", "questions"),
    *("sessions", "show", "fork", "watch", "cancel"),
)


class _Commands(LazyCommands):
    """``bh``'s commands, each imported when it runs: the Brain's, the Hands' and the
    chaos harness's modules cost ~1 s of CPU to import, which ``bh dev env`` or
    ``bh show`` need not pay."""

    sources: ClassVar[dict[str, Lazy]] = {
        "demo": Lazy("bh.demo", "demo"),
        "up": Lazy("bh.system", "up"),
        "init": Lazy("bh.init_command", "init"),  # a deployment's one-shot init job
        "chaos": Lazy("bh.chaos", "chaos"),
        "doctor": Lazy("bh.doctor", "doctor"),
        "down": Lazy("bh.system", "down"),
        "ps": Lazy("bh.system", "status"),
        "hands": Lazy("hands.__main__", "run", "Run a Hands instance (also: python -m hands)."),
        "brain": Lazy(
            "brain.__main__", "worker", "Run a Brain worker (also: python -m brain worker)."
        ),
        "scheduler": Lazy(
            "scheduler.__main__", "run", "Run the scheduler (also: python -m scheduler)."
        ),
        "hands-api": Lazy(
            "hands.api_server",
            "serve_command",
            "Serve the Hands HTTP API (token from BH_HANDS_API_TOKEN).",
        ),
        "session-api": Lazy(
            "session_api.server",
            "serve_command",
            "Serve the Session HTTP API (token from BH_SESSION_API_TOKEN).",
        ),
        "dev": Lazy("bh.devstack", help="Start and stop local infrastructure."),
        "store": Lazy("bh.store_commands"),
        "images": Lazy("bh.images_commands"),
        "ops": Lazy("bh.ops_commands"),
        "tools": Lazy("bh.tools_commands"),
        "workspace": Lazy("bh.workspace_commands"),  # bh workspace ls | get | versions | ...
        "artifacts": Lazy("bh.artifact_commands"),
        # bh submit | sessions | show | watch | cancel | fork | ...
        **{name: Lazy("bh.session_commands", member=True) for name in _SESSION_COMMANDS},
    }


app = typer.Typer(
    cls=_Commands,
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


def main() -> None:
    """``bh``: a project error that a command did not handle is one line on stderr
    (``code: message``) and exit status 2, as the commands that run their own say it —
    a traceback is for bugs, not for a refusal the user can act on."""
    try:
        app()
    except Exception as error:
        # imported here: a BrainhandsError was raised by a command that imported it
        from contracts import BrainhandsError

        if not isinstance(error, BrainhandsError):
            raise
        typer.echo(f"{error.code}: {error.message}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
