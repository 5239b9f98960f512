"""A worker process (Brain, Hands, scheduler) starts without importing what only the
HTTP APIs use: FastAPI builds its OpenAPI models on import (~0.1 s of CPU), paid again by
every restart of every worker, and by every process a crash test starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

API_ONLY = ("fastapi",)


@pytest.mark.parametrize("service", ["brain", "hands", "scheduler"])
def test_a_worker_starts_without_the_api_frameworks(service: str) -> None:
    probe = (
        f"import sys, {service}.__main__; "
        f"print(' '.join(m for m in {API_ONLY!r} if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert found == [], f"python -m {service} imports {found}"


def test_bh_imports_a_command_only_when_it_is_asked_for() -> None:
    """``bh dev env`` (run by every shell that loads the dev stack) imports the dev
    stack's commands, not the Brain's, the Hands' or the chaos harness's."""
    heavy = ("brain", "hands", "scheduler", "session_api", "bh.chaos", "fastapi")
    probe = (
        "import sys, bh.cli; "
        "from typer.testing import CliRunner; "
        "CliRunner().invoke(bh.cli.app, ['dev', '--help'], catch_exceptions=False); "
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert found == [], f"bh dev --help imports {found}"
