"""What a command did to each service, and the table that shows it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rich.table import Table


class State(StrEnum):
    """Where a service ended up after a command."""

    STARTED = "started"
    ALREADY_RUNNING = "already running"
    RUNNING = "running"
    EXTERNAL = "running, not ours"  # answering, but not started by bh dev: never stopped
    NOT_ANSWERING = "not answering"
    FAILED = "failed"
    SKIPPED = "skipped"
    STOPPED = "stopped"
    NOT_RUNNING = "not running"


UP_STATES = frozenset({State.STARTED, State.ALREADY_RUNNING, State.RUNNING, State.EXTERNAL})
DOWN_STATES = frozenset({State.NOT_ANSWERING, State.FAILED, State.NOT_RUNNING})

_STYLE = {
    State.STARTED: "green",
    State.ALREADY_RUNNING: "green",
    State.RUNNING: "green",
    State.EXTERNAL: "cyan",
    State.NOT_ANSWERING: "red",
    State.FAILED: "red",
    State.SKIPPED: "dim",
    State.STOPPED: "yellow",
    State.NOT_RUNNING: "dim",
}


@dataclass(frozen=True, kw_only=True)
class Report:
    """One service's outcome; ``log_tail`` is filled in when it failed."""

    service: str
    state: State
    address: str
    log_path: Path
    detail: str = ""
    required: bool = True
    log_tail: str = ""

    @property
    def up(self) -> bool:
        return self.state in UP_STATES

    @property
    def fatal(self) -> bool:
        """A required service that is not up: the command must exit non-zero."""
        return self.required and not self.up


def table(reports: Iterable[Report], *, title: str) -> Table:
    grid = Table(title=title, title_justify="left")
    # Fold rather than truncate: a path cut short with an ellipsis is useless.
    grid.add_column("service", no_wrap=True)
    grid.add_column("state", overflow="fold")
    grid.add_column("address", overflow="fold")
    grid.add_column("log", overflow="fold")
    grid.add_column("detail", overflow="fold")
    for report in reports:
        optional = not report.required and report.state in DOWN_STATES
        state = f"{report.state} (optional)" if optional else report.state.value
        grid.add_row(
            report.service,
            f"[{_STYLE[report.state]}]{state}[/]",
            report.address,
            str(report.log_path),
            report.detail,
        )
    return grid
