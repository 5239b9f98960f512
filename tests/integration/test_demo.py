"""The README's main command works: ``bh demo`` (the whole system) and ``bh demo --embedded``
recover the five emails after the kills."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.images import tool_images
from tests.support.processes import ROOT


def test_bh_demo_embedded_shows_reuse_verification_and_execution(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/demo.db"
    result = subprocess.run(
        [sys.executable, "-m", "bh.cli", "demo", "--embedded", "--store", store],
        cwd=ROOT,
        # piped, as a new user's `bh demo | tee` or a CI log: no terminal width to fit
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
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
    for address in ("ada", "grace", "alan", "edsger", "barbara"):  # not cut at 80 columns
        assert f"│ {address}@example.com " in result.stdout, result.stdout
    assert "Each email sent exactly once: yes" in result.stdout
    assert "no blind re-send): yes" in result.stdout


@pytest.mark.docker
@pytest.mark.nats
@pytest.mark.slow
def test_bh_demo_runs_the_whole_system_and_recovers_both_kills(tmp_path: Path) -> None:
    """Scheduler, Session API, Hands API, Brains and Hands as processes; brain-1 dies after
    relaying email 4, hands-1 while email 4's container waits; brain-2 and hands-2 finish."""
    tool_images()  # skips locally (fails in CI) without Docker; builds what is missing
    result = subprocess.run(
        [sys.executable, "-m", "bh.cli", "demo", "--store", f"sqlite:///{tmp_path}/demo.db"],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    row = r"│ (\d) │ \S+ +│ (\w+) +│ (brain-\d) +│ bh-\S+ (?:\(query\))? +│ (hands-\d) +│ "
    row += r"(brain-\d)"
    rows = re.findall(row, result.stdout)
    assert rows == [
        ("1", "reused", "brain-1", "hands-1", "brain-1"),
        ("2", "reused", "brain-1", "hands-1", "brain-1"),
        ("3", "reused", "brain-1", "hands-1", "brain-1"),
        ("4", "verified", "brain-1", "hands-2", "brain-2"),
        ("5", "executed", "brain-2", "hands-2", "brain-2"),
    ], result.stdout
    assert "brain-1 killed with SIGKILL right after relaying email 4" in result.stdout
    assert "hands-1 killed with SIGKILL while email 4's container" in result.stdout
    assert "Each email sent exactly once: yes; requested exactly once: yes" in result.stdout


@pytest.mark.docker
@pytest.mark.nats
@pytest.mark.slow
def test_bh_demo_coding_keeps_the_workspace_whole_through_both_kills(tmp_path: Path) -> None:
    """The coding assistant on the whole system: brain-1 dies right after the edit's
    intent is committed, hands-1 as it starts the second test run; the second test run
    is run again on hands-2 from its base, every applied call made one version, and the
    final tree is the expected one byte for byte (``bh.demo_coding`` checks it)."""
    tool_images()
    store = f"sqlite:///{tmp_path}/demo.db"
    result = subprocess.run(
        [sys.executable, "-m", "bh.cli", "demo", "--example", "coding", "--store", store],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert out.count("killed with SIGKILL") == 2, out[-6000:]
    rows = re.findall(r"│ \d+ +│ \w+ +│ (\w+) +│ (hands-\d) ", result.stdout)
    assert rows == [
        ("write_files", "hands-1"),
        ("run_command", "hands-1"),
        ("write_files", "hands-1"),
        ("run_command", "hands-2"),
    ], out[-6000:]
    assert "One version per applied call: yes (4)" in out
    assert "the final tree equals the expected tree byte for byte: yes" in out
    assert "fix.patch" in out and "test-report.txt" in out
