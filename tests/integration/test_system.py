"""``bh up`` / ``bh down``: the whole system as separate processes on this machine; a
task submitted through the Session API is driven by a Brain worker woken on RQ."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.images import tool_images
from tests.support.processes import ROOT
from tests.support.services import require

pytestmark = [pytest.mark.redis, pytest.mark.nats, pytest.mark.slow]


def bh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bh.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def system_env(tmp_path: Path) -> dict[str, str]:
    """An environment for ``bh up`` with its own dev home and nothing inherited that
    ``bh up`` would otherwise reuse."""
    require("BH_REDIS_URL", "Redis")
    require("BH_NATS_URL", "NATS JetStream")
    env = {**os.environ, "BH_DEV_HOME": str(tmp_path / "dev"), "COLUMNS": "200"}
    for name in ("BH_STORE_URL", "BH_SESSION_API_TOKEN", "BH_HANDS_API_TOKEN"):
        env.pop(name, None)
    return env


def _secrets_kept_private(system: Path, started: subprocess.CompletedProcess[str]) -> None:
    """The API tokens and the Hands secret are in 0600 files, in no output or log."""
    for private in (system / "env", system / "secrets.json"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    secrets = json.loads((system / "secrets.json").read_text()).values()
    logs = [path.read_text(errors="replace") for path in (system / "logs").glob("*.log")]
    assert logs
    shown = [started.stdout, started.stderr, *logs]
    assert not [secret for secret in secrets if any(secret in text for text in shown)]


def test_bh_up_runs_the_system_and_bh_down_stops_it(tmp_path: Path) -> None:
    env = system_env(tmp_path)
    started = bh(
        "up",
        *("--brains", "2", "--hands", "1", "--sandbox", "process", "--no-infra"),
        *("--namespace", "sysup", "--plugin", "tests.support.brain_plugins:plugin"),
        env=env,
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        for name in ("scheduler", "session-api", "hands-api", "brain-1", "brain-2", "hands-1"):
            assert name in started.stdout
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in (tmp_path / "dev" / "system" / "env").read_text().splitlines()
        )
        url = exports["BH_SESSION_API_URL"].strip("'")
        headers = {"Authorization": f"Bearer {exports['BH_SESSION_API_TOKEN'].strip(chr(39))}"}
        body = {"request_id": "r1", "input": {"task": {"kind": "slow", "input": 0}}}
        posted = httpx.post(f"{url}/v1/sessions/up1/submissions", json=body, headers=headers)
        assert posted.status_code == 201, posted.text
        deadline = time.monotonic() + 60
        while True:
            view = httpx.get(f"{url}/v1/sessions/up1", headers=headers).json()
            if view["submissions"][0]["status"] == "answered":
                break
            assert time.monotonic() < deadline, view
            time.sleep(0.2)
        _secrets_kept_private(tmp_path / "dev" / "system", started)
        _doctor_passes_then_names_what_fails(tmp_path / "dev" / "system" / "env", env)
    finally:
        stopped = bh("down", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert "terminated" in stopped.stdout
    listed = bh("ps", env=env)
    assert "running" not in listed.stdout.replace("not running", "")


def _doctor_passes_then_names_what_fails(exported: Path, env: dict[str, str]) -> None:
    """``bh doctor`` with bh up's env: every API and worker probe, a probe session, the
    metrics. Then with a wrong token and a dead probe: exit 1, those rows FAIL, the rest
    still checked, no traceback."""
    for line in exported.read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value.strip("'")
    assert len(env["BH_PROBE_URLS"].split()) == 4  # scheduler, 2 Brains, 1 Hands
    healthy = bh("doctor", env=env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "FAIL" not in healthy.stdout and "answered by " in healthy.stdout
    assert healthy.stdout.count(" ok ") >= 14  # 6 endpoints x 2, the session, the metrics
    broken = bh("doctor", "--session-token", "x" * 24, "--probe", "http://127.0.0.1:9", env=env)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "Traceback" not in broken.stdout + broken.stderr
    failing = [line for line in broken.stdout.splitlines() if "FAIL" in line]
    assert [line.split()[1] for line in failing] == ["probe", "probe", "probe"], broken.stdout
    assert "hands-api /metrics" in broken.stdout  # checked anyway


@pytest.mark.docker
def test_the_five_emails_example_runs_on_bh_up_with_bh_submit(tmp_path: Path) -> None:
    """``bh up --example five-emails``: the example's email service and model beside the
    system, ``send_email`` sandboxed on the Hands; ``bh submit`` and ``bh show``."""
    env = system_env(tmp_path)
    tool_images()  # skips locally (fails in CI) without Docker; builds what is missing
    started = bh(
        "up",
        *("--brains", "1", "--hands", "1", "--no-infra", "--namespace", "sysfive"),
        *("--example", "five-emails"),
        env=env,
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "registered send_email@1" in started.stdout
        for line in (tmp_path / "dev" / "system" / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
        text = "Send the approved maintenance notice to our five customers."
        submitted = bh("submit", "five", text, "--request-id", "notify-1", env=env)
        assert submitted.returncode == 0, submitted.stderr
        again = bh("submit", "five", text, "--request-id", "notify-1", env=env)
        assert "already submitted" in again.stdout
        deadline = time.monotonic() + 90
        while "answered" not in (shown := bh("show", "five", env=env)).stdout:
            assert time.monotonic() < deadline, shown.stdout + shown.stderr
            time.sleep(1)
        assert shown.stdout.count("send_email@1") == 5
        probe = '{"to": "doctor@example.com", "subject": "probe", "body": "bh doctor"}'
        checked = bh("doctor", "--tool", "send_email", "--args", probe, env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "probe operation" in checked.stdout and "FAIL" not in checked.stdout
    finally:
        bh("down", env=env)
