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
