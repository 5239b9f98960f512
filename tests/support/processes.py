"""Start helper processes of the test suite with the same interpreter and environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_module(
    module: str, *args: str, stdout: int = subprocess.PIPE, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def brain_run(
    store_url: str,
    *,
    plugins: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    session: str = "s1",
) -> subprocess.CompletedProcess[str]:
    """``python -m brain run`` on ``session`` to the end; a SIGKILL (a crash point) is
    an expected ending, any other failure raises with the worker's stderr."""
    args = [sys.executable, "-m", "brain", "run", "--store", store_url, "--session", session]
    for plugin in plugins:
        args += ["--plugin", plugin]
    done = subprocess.run(
        args,
        cwd=ROOT,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr[-2000:])
    return done


def model_env(model_url: str, **extra: str) -> dict[str, str]:
    """This process's environment for a Brain whose model is the scripted server at
    ``model_url`` (token ``t``, model ``m``), with ``extra`` variables."""
    return {
        **os.environ,
        "BH_MODEL_BASE_URL": f"{model_url}/v1",
        "BH_MODEL_API_KEY": "t",
        "BH_MODEL_NAME": "m",
        **extra,
    }
