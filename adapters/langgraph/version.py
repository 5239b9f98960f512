"""The framework versions this adapter is pinned to, and the one-line warning when the
installed ones differ (the adapter may still work; it was not tested with them)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version

log = logging.getLogger("adapters.langgraph")

#: the distributions of the ``langgraph`` extra, at their pins (pyproject.toml)
PINS: Mapping[str, str] = {"langgraph": "1.2.24", "langgraph-checkpoint": "4.3.2"}


def installed(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def check_versions(found: Callable[[str], str] = installed) -> str | None:
    """Log one warning line naming every pinned distribution installed at another
    version; returns that line (``None`` when all match)."""
    differ = [
        f"{name} {found(name)} (pinned {pin})" for name, pin in PINS.items() if found(name) != pin
    ]
    if not differ:
        return None
    line = "LangGraph adapter: " + ", ".join(differ) + "; it was tested only with the pins"
    log.warning(line)
    return line
