"""The consoles of the ``bh`` command: on a terminal, its width; piped (``bh demo |
tee``, a CI log) rich would assume 80 columns and cut tables (``ada@exa…``), so a
stream that is not a terminal gets ``PIPED_WIDTH`` unless ``COLUMNS`` says otherwise."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

PIPED_WIDTH = 160


def console(*, stderr: bool = False, **options: Any) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "width" not in options and not os.environ.get("COLUMNS") and not stream.isatty():
        options["width"] = PIPED_WIDTH
    return Console(stderr=stderr, **options)
