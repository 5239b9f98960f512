"""The command lines of every entry point (``bh``, ``python -m brain``, ``-m hands``,
``-m scheduler``): Typer's, with one defect of its rich help mended — Typer 0.29 prints
a value type beside every option, so a flag, which takes no value, read ``--all
<bool>``. Pass ``cls=Commands`` to a ``typer.Typer`` of several commands: the flags of
every command below it, subgroups included, are quieted when the command tree is built;
an app of one command (Typer makes it no group) runs with ``run(app)``."""

from __future__ import annotations

from typing import Any

import typer
from typer._click.core import Context
from typer.core import TyperGroup, TyperOption


class Commands(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quiet_flags(self)


def quiet_flags(command: Any) -> None:
    """Give each flag an empty metavar, which Typer prints in place of the type (the
    command is one of Typer's own vendored click's, not ``click``'s)."""
    # --help is made on first use and kept: made here, with the default names, it is
    # the one every later use gets
    help_option = command.get_help_option(Context(command))
    for param in [*command.params, help_option]:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        quiet_flags(sub)


def run(app: typer.Typer) -> None:
    """Run a Typer app of one command, its flags quieted."""
    command = typer.main.get_command(app)
    quiet_flags(command)
    command()
