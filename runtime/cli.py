"""The command lines of every entry point (``bh``, ``python -m brain``, ``-m hands``,
``-m scheduler``): Typer's, with two defects of its rich help mended — Typer 0.29 prints
a value type beside every option, so a flag, which takes no value, read ``--all
<bool>``; and a group's list of commands kept the line breaks of each docstring. Pass
``cls=Commands`` to a ``typer.Typer`` of several commands: every command below it,
subgroups included, is mended when the command tree is built; an app of one command
(Typer makes it no group) runs with ``run(app)``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

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


@dataclass(frozen=True)
class Lazy:
    """Where a command of a ``LazyCommands`` group is: ``attribute`` of ``module``, a
    Typer app or a command function. ``member``: the command is the app's own command of
    the same name (an app added without a name, whose commands sit in the group)."""

    module: str
    attribute: str = "app"
    help: str | None = None
    member: bool = False


class LazyCommands(Commands):
    """A ``Commands`` group whose commands, named in a subclass's ``sources``, are
    imported when one is asked for (to run it, or by a help page listing it), not when
    the program starts: ``bh dev env`` need not import the Brain."""

    sources: ClassVar[dict[str, Lazy]] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in self.sources if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        source = self.sources.get(cmd_name)
        if found is None and source is not None:
            found = _load(ctx, cmd_name, source)
            _one_line(found)
            quiet_flags(found)
            self.add_command(found, cmd_name)
        return found


def _load(ctx: Context, name: str, source: Lazy) -> Any:
    """The command as it would be had it been added to the group at start."""
    target = getattr(importlib.import_module(source.module), source.attribute)
    parent = typer.Typer(add_completion=False)
    parent.callback()(_nothing)  # a group even of one command, as the real one is
    said: dict[str, Any] = {} if source.help is None else {"help": source.help}
    if isinstance(target, typer.Typer):
        named: dict[str, Any] = {} if source.member else {"name": name}
        parent.add_typer(target, **named, **said)
    else:
        parent.command(name=name, **said)(target)
    return typer.main.get_command(parent).get_command(ctx, name)  # type: ignore[attr-defined]


def _nothing() -> None:
    pass


def quiet_flags(command: Any) -> None:
    """Give each flag an empty metavar, which Typer prints in place of the type (the
    command is one of Typer's own vendored click's, not ``click``'s)."""
    # --help is made on first use and kept: made here, with the default names, it is
    # the one every later use gets
    help_option = command.get_help_option(Context(command))
    _quiet([*command.params, help_option])
    for sub in getattr(command, "commands", {}).values():
        _one_line(sub)
        quiet_flags(sub)


def _one_line(command: Any) -> None:
    """A group's list of commands prints the docstring's first paragraph with its line
    breaks: one line, reflowed to the page's width."""
    if command.help and not command.short_help:
        command.short_help = " ".join(command.help.split("\n\n")[0].split())


def _quiet(params: list[Any]) -> None:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""


def run(app: typer.Typer) -> None:
    """Run a Typer app of one command, its flags quieted."""
    command = typer.main.get_command(app)
    quiet_flags(command)
    command()
