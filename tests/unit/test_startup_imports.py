"""A worker process (Brain, Hands, scheduler) starts without importing what only the
HTTP APIs use: FastAPI builds its OpenAPI models on import (~0.1 s of CPU), paid again by
every restart of every worker, and by every process a crash test starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

API_ONLY = ("fastapi",)


def _imported(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys; print(' '.join(m for m in {modules!r} if m in sys.modules))"
    return subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()


@pytest.mark.parametrize("service", ["brain", "hands", "scheduler"])
def test_a_worker_starts_without_the_api_frameworks(service: str) -> None:
    found = _imported(f"import {service}.__main__", API_ONLY)
    assert found == [], f"python -m {service} imports {found}"


def test_bh_imports_a_command_only_when_it_is_asked_for() -> None:
    """``bh dev env`` (run by every shell that loads the dev stack) imports the dev
    stack's commands, not the Brain's, the Hands' or the chaos harness's."""
    heavy = ("brain", "hands", "scheduler", "session_api", "bh.chaos", "fastapi")
    code = (
        "import bh.cli; from typer.testing import CliRunner; "
        "CliRunner().invoke(bh.cli.app, ['dev', '--help'], catch_exceptions=False)"
    )
    found = _imported(code, heavy)
    assert found == [], f"bh dev --help imports {found}"


def test_bh_names_every_session_command_it_loads_lazily() -> None:
    """``bh``'s top level lists the session commands by name without importing them:
    the list must be exactly the commands ``bh.session_commands`` defines."""
    import typer

    from bh import session_commands
    from bh.cli import _Commands

    defined = set(typer.main.get_command(session_commands.app).commands)  # type: ignore[attr-defined]
    named = {name for name, source in _Commands.sources.items() if source.member}
    assert named == defined
