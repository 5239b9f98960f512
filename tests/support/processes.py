"""Start helper processes of the test suite with the same interpreter and environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_module(module: str, *args: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )
