"""A failed test's leaks are reported against it, not the next test (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]

_LEAKING = """
import gc
import warnings


class Unclosed:
    def __init__(self) -> None:
        self.me = self  # a cycle: freed by a garbage collection, not at once

    def __del__(self) -> None:
        warnings.warn("unclosed client", ResourceWarning)


def test_a_fails_holding_an_unclosed_client() -> None:
    client = Unclosed()
    assert client is None


def test_b_runs_next() -> None:
    gc.collect()
"""


def test_the_leak_of_a_failed_test_does_not_fail_the_next(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import _collected_after_a_failure, pytest_runtest_makereport\n"
    )
    (tmp_path / "test_leaking.py").write_text(_LEAKING)
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    summary = (ran.stdout.strip().splitlines() or [ran.stderr])[-1]
    assert "1 failed, 1 passed, 1 error" in summary, ran.stdout[-3000:]
    assert "FAILED test_leaking.py::test_b_runs_next" not in ran.stdout
