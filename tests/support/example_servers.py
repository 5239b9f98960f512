"""The email service and the scripted model server as real processes, for tests whose
Brain workers get killed (the servers must outlive them)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from examples.emails import scenario
from tests.support.http_server import free_port
from tests.support.processes import ROOT

MODEL_TOKEN = "model-test-token"
EMAIL_TOKEN = "email-test-token"


@dataclass(frozen=True)
class ExampleServers:
    email_url: str
    model_url: str

    def worker_env(self, **extra: str) -> dict[str, str]:
        """Environment for a ``python -m brain run`` worker of the five-emails example."""
        return scenario.worker_env(
            email_url=self.email_url,
            email_token=EMAIL_TOKEN,
            model_url=self.model_url,
            model_token=MODEL_TOKEN,
            **extra,
        )


@contextmanager
def example_servers(script: Path) -> Iterator[ExampleServers]:
    email_port, model_port = free_port(), free_port()
    email = _start(
        ["-m", "examples.emails.service", "--port", str(email_port)],
        {"BH_EMAIL_SERVICE_TOKEN": EMAIL_TOKEN},
    )
    model = _start(
        ["-m", "brain.model.scripted", "--script", str(script), "--port", str(model_port)],
        {"BH_SCRIPTED_MODEL_TOKEN": MODEL_TOKEN},
    )
    try:
        yield ExampleServers(
            email_url=f"http://127.0.0.1:{email_port}", model_url=f"http://127.0.0.1:{model_port}"
        )
    finally:
        for process in (email, model):
            process.terminate()
            process.communicate(timeout=10)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        process.communicate()
        raise RuntimeError(f"{args[1]} did not start: {line!r}")
    return process
