"""The ``bh`` command: one entry point for operators and developers."""

from __future__ import annotations

import typer

from bh import demo, devstack, images_commands, store_commands
from hands import __main__ as hands_main

app = typer.Typer(
    help="brainhands: durable Brain/Hands execution for long-running agent tasks.",
    no_args_is_help=True,
)
app.add_typer(devstack.app, name="dev", help="Start and stop local infrastructure.")
app.add_typer(store_commands.app, name="store")
app.add_typer(images_commands.app, name="images")
app.command(name="demo")(demo.demo)
app.command(name="hands", help="Run a Hands instance (also: python -m hands).")(hands_main.run)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
