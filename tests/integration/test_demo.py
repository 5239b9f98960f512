"""The README's main command works: ``bh demo`` recovers the five emails after a kill."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.images import tool_images
from tests.support.processes import ROOT


def test_bh_demo_shows_reuse_verification_and_execution(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bh.cli", "demo", "--store", f"sqlite:///{tmp_path}/demo.db"],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = re.findall(r"│ (\d) │ (\S+) +│ (\w+) +│", result.stdout)
    assert [(n, recovery) for n, _, recovery in rows] == [
        ("1", "reused"),
        ("2", "reused"),
        ("3", "reused"),
        ("4", "verified"),
        ("5", "executed"),
    ]
    assert "killed with SIGKILL" in result.stdout
    assert "Each email sent exactly once: yes" in result.stdout
    assert "no blind re-send): yes" in result.stdout


@pytest.mark.docker
@pytest.mark.nats
@pytest.mark.slow
def test_bh_demo_hands_runs_the_tool_sandboxed_and_recovers_both_kills(tmp_path: Path) -> None:
    tool_images()  # skips locally (fails in CI) without Docker; builds what is missing
    result = subprocess.run(
        [sys.executable, "-m", "bh.cli", "demo", "--hands"],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = re.findall(r"│ (\d) │ (\S+) +│ (\w+) +│ (bh-op-\S+)", result.stdout)
    assert [(n, recovery) for n, _, recovery, _ in rows] == [
        ("1", "reused"),
        ("2", "reused"),
        ("3", "reused"),
        ("4", "verified"),
        ("5", "executed"),
    ]
    assert "Brain #1 killed with SIGKILL" in result.stdout
    assert "Hands #1 killed with SIGKILL while container" in result.stdout
    assert "Each email sent exactly once: yes; requested exactly once: yes" in result.stdout
