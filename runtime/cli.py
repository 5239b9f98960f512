"""The command lines of every entry point (``bh``, ``python -m brain``, ``-m hands``,
``-m scheduler``): Typer's, with two defects of its rich help mended — Typer 0.29 prints
a value type beside every option, so a flag, which takes no value, read ``--all
<bool>``; and a group's list of commands kept the line breaks of each docstring. Pass
``cls=Commands`` to a ``typer.Typer`` of several commands: every command below it,
subgroups included, is mended when the command tree is built; an app of one command
(Typer makes it no group) runs with ``run(app)``."""

from __future__ import annotations

from typing import Any

import typer
from typer._click.core import Context
from typer.core import TyperGroup, TyperOption


class Commands(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quiet_flags(self)

    def get_params(self, ctx: Context) -> list[Any]:
        # Typer appends --install-completion and --show-completion after the group is
        # made: they are quieted when the help page asks for the parameters
        params = super().get_params(ctx)
        _quiet(params)
        return params


def quiet_flags(command: Any) -> None:
    """Give each flag an empty metavar, which Typer prints in place of the type (the
    command is one of Typer's own vendored click's, not ``click``'s)."""
    # --help is made on first use and kept: made here, with the default names, it is
    # the one every later use gets
    help_option = command.get_help_option(Context(command))
    _quiet([*command.params, help_option])
    for sub in getattr(command, "commands", {}).values():
        if sub.help and not sub.short_help:
            # a group's list of commands prints the docstring's first paragraph with
            # its line breaks: one line, reflowed to the page's width
            sub.short_help = " ".join(sub.help.split("\n\n")[0].split())
        quiet_flags(sub)


def _quiet(params: list[Any]) -> None:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""


def run(app: typer.Typer) -> None:
    """Run a Typer app of one command, its flags quieted."""
    command = typer.main.get_command(app)
    quiet_flags(command)
    command()
