"""``bh up`` / ``bh down``: the whole system as separate processes on this machine; a
task submitted through the Session API is driven by a Brain worker woken on RQ."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace

from runtime.tracing import work_context
from tests.support.images import tool_images
from tests.support.otlp import otlp_receiver
from tests.support.processes import ROOT
from tests.support.services import missing, require

# `bh up` serves on fixed ports: one such test at a time (side by side, on one worker)
pytestmark = [
    pytest.mark.redis,
    pytest.mark.nats,
    pytest.mark.slow,
    pytest.mark.xdist_group("bh-up"),
]


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
    for name in ("BH_STORE_URL", "BH_SESSION_API_TOKEN", "BH_HANDS_API_TOKEN", "BH_METRICS_TOKEN"):
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
    system, ``send_email`` sandboxed on the Hands; ``bh submit`` and ``bh show``; then
    every service's metrics pass ``promtool check metrics`` and count what happened."""
    with otlp_receiver() as receiver:  # tracing on: log lines carry their trace ids
        env = system_env(tmp_path) | {
            "BH_LOG_FORMAT": "json",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            # per million tokens: the cost metric is then the tokens' worth
            "BH_MODEL_PRICE_INPUT": "2",
            "BH_MODEL_PRICE_OUTPUT": "8",
        }
        _five_emails_on_bh_up(tmp_path, env)


def _five_emails_on_bh_up(tmp_path: Path, env: dict[str, str]) -> None:
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
        _every_service_exports_metrics(env, tmp_path)
        _logs_are_json_lines_with_ids(tmp_path / "dev" / "system" / "logs")
    finally:
        bh("down", env=env)


def _every_service_exports_metrics(env: dict[str, str], tmp_path: Path) -> None:
    """Each process's ``/metrics`` (the APIs' behind their tokens, the workers' beside
    their probes behind the scrape token) passes ``promtool check metrics`` and shows the
    five emails: model calls and tokens, results applied, operations by tool, wakes."""
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool is not installed (Debian's prometheus package; scripts/test installs it)")
    apis = {
        "session-api": (env["BH_SESSION_API_URL"], env["BH_SESSION_API_TOKEN"]),
        "hands-api": (env["BH_HANDS_API_URL"], env["BH_HANDS_API_TOKEN"]),
    }
    workers = {
        url.rpartition(":")[2]: (url, env["BH_METRICS_TOKEN"])
        for url in env["BH_PROBE_URLS"].split()
    }
    scraped: dict[str, str] = {}
    for name, (url, token) in {**apis, **workers}.items():
        assert httpx.get(f"{url}/metrics").status_code == 401, name
        response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, (name, response.text)
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=response.text, capture_output=True, text=True
        )
        assert checked.returncode == 0, (name, checked.stdout + checked.stderr)
        scraped[name] = response.text
    text = "\n".join(scraped.values())
    (tmp_path / "metrics.txt").write_text(text)
    values = _samples(text)
    assert values['brainhands_model_calls_total{model="scripted-notices",outcome="ok"}'] >= 2
    assert values['brainhands_model_tokens_total{model="scripted-notices",type="input"}'] > 0
    assert values["brainhands_brain_results_applied_total"] >= 5
    assert values["brainhands_brain_result_apply_seconds_count"] >= 5
    assert values["brainhands_brain_wake_start_seconds_count"] >= 1
    assert values['brainhands_brain_drives_total{outcome="driven"}'] >= 1
    sent = '{status="succeeded",termination="exited",tool="send_email"}'
    assert values[f"brainhands_hands_operations_total{sent}"] >= 5
    assert values["brainhands_hands_sandbox_start_seconds_count"] >= 5
    assert values["brainhands_hands_dispatch_wait_seconds_count"] >= 5
    assert values['brainhands_scheduler_wakes_total{cause="result"}'] >= 5
    assert values['brainhands_dispatch_backlog{state="pending"}'] == 0
    assert values["brainhands_dispatch_oldest_age_seconds"] == 0
    assert values['brainhands_results_backlog{state="pending"}'] == 0
    assert values["brainhands_results_oldest_age_seconds"] == 0
    tokens = {
        kind: values[f'brainhands_model_tokens_total{{model="scripted-notices",type="{kind}"}}']
        for kind in ("input", "output")
    }
    worth = (2 * tokens["input"] + 8 * tokens["output"]) / 1e6
    assert values['brainhands_model_cost_total{model="scripted-notices"}'] == pytest.approx(worth)
    for capacity in ("brainhands_brain_slots", "brainhands_hands_slots"):
        assert values[capacity] > 0
    for in_use in ("brainhands_brain_slots_in_use", "brainhands_hands_slots_in_use"):
        assert values[in_use] == 0, "all five answered: no slot still busy"


def _samples(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of an exposition, summed over the processes (labels
    sorted by name, as the client writes them)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            values[series] = values.get(series, 0.0) + float(value)
    return values


def _logs_are_json_lines_with_ids(logs: Path) -> None:
    """With ``BH_LOG_FORMAT=json`` every line a service logged is a JSON object; the
    Brain's model call names its session and task."""
    lines: list[dict[str, Any]] = []
    services = ("brain-", "hands-", "scheduler", "session-api")  # not the example's servers
    for path in (p for p in logs.glob("*.log") if p.name.startswith(services)):
        for text in path.read_text().splitlines():
            if text.strip() and not text.startswith("--- bh dev"):  # the launcher's header
                lines.append(json.loads(text))
    assert lines and all({"ts", "level", "service", "message"} <= line.keys() for line in lines)
    calls = [line for line in lines if "chat/completions" in line["message"]]
    assert calls and all(line["service"] == "brain" for line in calls)
    assert all(line["session_id"] == "five" and line["task_id"] for line in calls)
    # each email's line on the Hands names its operation, session, task and trace: the
    # trace of the session's work, the one the Brain's lines name too
    root = trace.get_current_span(work_context("five", "root.notify-1")).get_span_context()
    work = f"{root.trace_id:032x}"
    handled = [line for line in lines if line["service"] == "hands" and "operation_id" in line]
    emails = {line["operation_id"] for line in handled if line["session_id"] == "five"}
    assert len(emails) == 5, handled
    assert all(
        line["task_id"] and line["trace_id"] == work
        for line in handled
        if line["session_id"] == "five"
    )
    assert {line.get("trace_id") for line in calls} == {work}
