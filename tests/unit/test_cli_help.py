"""Every help page of ``bh`` reads cleanly: no markup left over (``[[NAMES]...]...``,
a dangling `` .`` where Rich ate a bracket), a variable named one way (``[env var: X]``,
never also ``[X]``), defaults said, and ``bh --version``."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys

from typer.testing import CliRunner

from bh.cli import app

ENV = {"COLUMNS": "120", "NO_COLOR": "1"}


def commands() -> list[list[str]]:
    """Every command and subcommand, from ``bh --help`` and each group's help."""
    found: list[list[str]] = []
    runner = CliRunner()

    def names(args: list[str]) -> list[str]:
        page = runner.invoke(app, [*args, "--help"], env=ENV).output
        section = page.split("Commands", 1)[1] if "Commands" in page else ""
        return re.findall(r"^│ ([a-z][a-z-]*) ", section, re.M)

    for name in names([]):
        subcommands = names([name])
        found.extend([[name, sub] for sub in subcommands] if subcommands else [[name]])
    return found


def test_every_help_page_reads_cleanly() -> None:
    runner = CliRunner()
    pages = commands()
    assert len(pages) > 30, pages
    for args in pages:
        page = runner.invoke(app, [*args, "--help"], env=ENV)
        assert page.exit_code == 0, (args, page.output)
        for artifact in ("[[", " .\n", " . ", "[BH_"):
            assert artifact not in page.output.replace("│", "\n"), (args, artifact, page.output)


def test_the_version_and_the_hands_default_concurrency_are_said() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["--version"], env=ENV).output.startswith("brainhands ")
    assert "else 4" in runner.invoke(app, ["hands", "--help"], env=ENV).output


def test_a_flag_shows_no_value_type() -> None:
    """A flag takes no value: its row names no type (Typer printed ``<bool>``), while an
    option that takes one still says which."""
    runner = CliRunner()
    page = runner.invoke(app, ["sessions", "--help"], env=ENV).output
    assert "<bool>" not in page, page
    assert re.search(r"--all\s+Every session", page), page
    assert re.search(r"--limit\s+<int range>", page), page
    for args in [[], *commands()]:  # the root page too: its completion flags are added late
        assert "<bool>" not in runner.invoke(app, [*args, "--help"], env=ENV).output, args


def test_the_services_own_command_lines_show_no_value_type_for_a_flag() -> None:
    """``python -m hands`` and ``-m scheduler`` are one command each (no group), run by
    ``runtime.cli.run``; ``-m brain`` is a group."""
    for module in (["hands"], ["scheduler"], ["brain", "worker"]):
        page = subprocess.run(
            [sys.executable, "-m", *module, "--help"],
            capture_output=True,
            text=True,
            env={**os.environ, **ENV},
            check=True,
        ).stdout
        assert "--help" in page, module
        assert "<bool>" not in page, (module, page)


def test_a_groups_list_of_commands_reflows_each_docstring() -> None:
    """The list printed a docstring's line breaks: ``Brains, Hands`` ended a short row and
    ``in Docker)`` began the next. Each row but a command's last is filled to the box."""
    runner = CliRunner()
    for args in [[], *(group for group in commands() if len(group) == 1)]:
        page = runner.invoke(app, [*args, "--help"], env={**ENV, "COLUMNS": "80"}).output
        if "─ Commands ─" not in page:
            continue
        box = page.split("─ Commands ─")[-1].splitlines()[1:]
        rows = [line.strip("│").rstrip() for line in box if line.startswith("│")]
        for row, following in itertools.pairwise(rows):
            continued = following.startswith(" " * 3)  # the next line goes on with this one
            assert not continued or len(row) > 60, (args, row, following)
