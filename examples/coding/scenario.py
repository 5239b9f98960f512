"""The coding-assistant example's script and the tree it must leave.

The scripted model (``script.json``) writes a small package with a bug (``calc.mean``
divides by one too few), runs its tests (they fail: ``test_mean``), rewrites the file the
failure names, runs the tests again (they pass) and ends. ``write_files`` publishes each
change as a patch and ``run_command`` each test run's output as a report. The expected
tree is what the script's writes leave, derived from the script itself.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCRIPT_PATH = Path(__file__).with_name("script.json")
MESSAGE = "Write the calc package with its tests, run them, and fix what fails."
WRITE = "write_files"
RUN = "run_command"
#: the tool images (``sandbox-images/tools/<dir>``) the example registers
IMAGES = ("workspace-write", "workspace-run")


@cache
def _script() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SCRIPT_PATH.read_text())
    return document


def model_name() -> str:
    return str(_script()["model"])


def calls() -> list[tuple[str, dict[str, Any]]]:
    """The script's tool calls in order: (tool, arguments)."""
    return [
        (call["name"], call["arguments"])
        for turn in _script()["turns"]
        for call in turn.get("tool_calls", ())
    ]


def expected_tree() -> dict[str, bytes]:
    """Every file the task must leave in the workspace: path → bytes."""
    tree: dict[str, bytes] = {}
    for tool, arguments in calls():
        if tool == WRITE:
            tree |= {path: text.encode() for path, text in arguments["files"].items()}
    return tree
