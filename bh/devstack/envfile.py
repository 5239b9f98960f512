"""The shell ``export`` lines that point clients (and tests) at the running services."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path


def render(exports: Mapping[str, str]) -> str:
    """``export NAME=value`` lines, values shell-quoted, ready for ``eval`` or ``source``."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in exports.items())


def write(path: Path, exports: Mapping[str, str]) -> None:
    """Replace ``path`` atomically, so a concurrent ``source`` never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(exports))
    tmp.replace(path)
