"""Your own agent and tool on the compose deployment, from ``docs/deploy-own-agent.md``
as written (issue 36): its shell blocks run by bash from the checkout, with a project of
the test's own given only through the documented settings (ports, secrets, egress
network, readiness limit). Then what the deployment promises a user whose process
dies: a Brain's and a Hands' process SIGKILLed from the host are started again by their
restart policy alone, and a scheduler whose NATS traffic is dropped exits by itself once
it has not been ready for ``BH_UNREADY_LIMIT_S`` and comes back ready. A second session
is answered after all of it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hands.settings import store_namespace
from tests.deploy.deployment import Deployment
from tests.support.images import require_docker
from tests.support.processes import ROOT
from tests.support.services import free_ports, missing

DOC = ROOT / "docs" / "deploy-own-agent.md"
#: the readiness limit of this deployment (seconds): a scheduler cut from NATS exits then
UNREADY_LIMIT = 15
#: how long a killed service has to be running again by its restart policy
RESTART_WITHIN = 30.0

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.docker,
    pytest.mark.slow,
    # a cold machine builds the images first (debootstrap: ~3 min); the run is ~3 min
    pytest.mark.timeout(900),
]


def blocks() -> list[str]:
    """The page's sh blocks under "On compose": build, up and use, down."""
    text = DOC.read_text()
    section = text[text.index("## On compose") : text.index("## On Kubernetes")]
    found = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(found) == 3, f"{DOC.name}: expected 3 sh blocks under 'On compose'"
    return found


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """A project of this test's own, named and placed by the settings alone; its
    containers, volumes, networks and sandboxes removed afterwards (the page's last
    block, then what compose leaves)."""
    require_docker()
    if shutil.which("docker-compose") is None:
        missing("docker-compose is not installed (scripts/install: apt-get install it)")
    if os.geteuid() != 0:
        missing("the deploy test runs as root (it builds root images, reads 0440 secrets)")
    project = f"bho{uuid.uuid4().hex[:8]}"
    s3, nats, api, hands_api, hands_probe = free_ports(5)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BH_", "VIRTUAL_ENV"))}
    env |= {
        "COLUMNS": "200",
        "COMPOSE_PROJECT_NAME": project,
        "BH_SECRETS": str(tmp_path / "secrets"),
        "BH_S3_PORT": str(s3),
        "BH_NATS_PORT": str(nats),
        "BH_SESSION_API_PUBLISH": f"127.0.0.1:{api}",
        "BH_HANDS_API_PORT": str(hands_api),
        "BH_HANDS_PROBE_PORT": str(hands_probe),
        "BH_HANDS_EGRESS_NETWORK": f"{project}-egress",
        "BH_UNREADY_LIMIT_S": str(UNREADY_LIMIT),
    }
    store = f"s3://brainhands?endpoint_url=http://127.0.0.1:{s3}&region=us-east-1"
    # what Deployment.clean removes besides compose's own: the sandboxes, the networks
    env |= {
        "BH_HANDS_OWNER": store_namespace(store),
        "BH_EGRESS_NETWORK": f"{project}-egress",
        "BH_DEPLOY_NETWORK": f"{project}_default",
        "BH_OUTSIDE_NETWORK": f"{project}-none",
    }
    found = Deployment(project, env, tmp_path)
    try:
        yield found
    finally:
        found.save_logs()
        done = _bash(blocks()[2], env, timeout=180)
        print(f"own-agent: down: rc {done.returncode} {done.stderr[-500:]}")
        for left in asyncio.run(found.clean()):
            print(f"own-agent: left behind: {left}")
        found.client.close()


async def test_your_own_agent_deploys_from_the_docs_and_its_services_restart_by_themselves(
    deployment: Deployment,
) -> None:
    build, use, _ = blocks()
    started = time.monotonic()
    done = await asyncio.to_thread(_bash, build, deployment.env, timeout=900)
    assert done.returncode == 0, f"the build block failed:\n{done.stdout[-3000:]}{done.stderr}"
    built = time.monotonic()
    done = await asyncio.to_thread(_bash, use, deployment.env, timeout=420)
    assert done.returncode == 0, f"the deploy block failed:\n{done.stdout[-4000:]}{done.stderr}"
    _answered(_last_json(done.stdout), "Ada")
    answered = time.monotonic()

    for service in ("brain", "hands"):
        container = (await deployment.found(service))[0]
        restarted = await deployment.killed_and_restarted(container, within=RESTART_WITHIN)
        assert restarted, f"{container.name}: not started again after its SIGKILL"
        await deployment.healthy(service, len(await deployment.found(service)))

    scheduler = (await deployment.found("scheduler-1"))[0]
    await _cut_from_nats(deployment, scheduler)

    task = json.dumps({"task": {"kind": "greet", "input": {"name": "Grace"}}})
    again = _bh(
        deployment.env,
        f"submit greet-grace --json-input '{task}' && bh watch greet-grace --until-done "
        ">/dev/null && bh show greet-grace --json",
    )
    done = await asyncio.to_thread(_bash, again, deployment.env, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    _answered(_last_json(done.stdout), "Grace")
    print(
        f"own-agent: images in {built - started:.0f} s, deployed and answered in "
        f"{answered - built:.0f} s, restarts checked in {time.monotonic() - answered:.0f} s"
    )


def _last_json(printed: str) -> dict[str, Any]:
    """The last JSON document printed (``bh show --json``'s, after the other commands')."""
    return dict(json.loads(printed[printed.rindex('{\n  "session_id"') :]))


def _answered(shown: dict[str, Any], name: str) -> None:
    """The session's submission answered with the greeting and letter count, its
    sandboxed tool executed once, by a Hands."""
    submission = shown["submissions"][0]
    assert submission["status"] == "answered", submission
    result = submission["answer"]
    assert result["greeting"] == f"HELLO, {name.upper()}!", result
    assert result["letters"] == len(name), result
    counted = [op for op in shown["operations"] if op["tool"] == "letter_count"]
    assert len(counted) == 1 and counted[0]["status"] == "succeeded", counted
    assert counted[0]["attempts"] == 1, counted
    assert str(counted[0]["executor"]).startswith("hands:"), counted


async def _cut_from_nats(deployment: Deployment, scheduler: Any) -> None:
    """Drop the scheduler's NATS traffic (a rule in its own network namespace): not
    ready, it must exit by itself (3) after ``UNREADY_LIMIT`` and its restart policy
    start a fresh process — in a fresh namespace, without the rule — which is ready."""
    await asyncio.to_thread(scheduler.reload)
    before = int(scheduler.attrs["RestartCount"])
    pid = str(scheduler.attrs["State"]["Pid"])
    rule = ["-p", "tcp", "--dport", "4222", "-j", "DROP"]
    await asyncio.to_thread(_in_namespace, pid, "-I", "OUTPUT", *rule)
    deadline = time.monotonic() + UNREADY_LIMIT + 90
    while time.monotonic() < deadline:
        await asyncio.to_thread(scheduler.reload)
        if int(scheduler.attrs["RestartCount"]) > before:
            break
        await asyncio.sleep(1)
    else:
        _in_namespace(pid, "-D", "OUTPUT", *rule)
        pytest.fail(f"{scheduler.name}: cut from NATS, not restarted within {UNREADY_LIMIT + 90} s")
    log = (await asyncio.to_thread(scheduler.logs)).decode(errors="replace")
    assert "so that a fresh process takes over" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]  # it stopped and exited 3, not crashed
    await deployment.healthy("scheduler-1", 1, within=120)


def _in_namespace(pid: str, *rule: str) -> None:
    command = ["nsenter", "-t", pid, "-n", "iptables", "-w", *rule]
    subprocess.run(command, check=True, capture_output=True)


def _bh(env: dict[str, str], command: str) -> str:
    """A ``bh`` command line as the page's reader runs it: the venv active, the Session
    API's address and token as the page exports them."""
    secrets = env["BH_SECRETS"]
    return (
        ". .venv/bin/activate\n"
        f'export BH_SESSION_API_URL="http://{env["BH_SESSION_API_PUBLISH"]}"\n'
        f'export BH_SESSION_API_TOKEN="$(python -m bh.deploy_secrets {secrets} --token '
        'session-api)"\n'
        f"bh {command}\n"
    )


def _bash(script: str, env: dict[str, str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` typed into a new shell at the checkout, stopping at the first failure."""
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_page_has_the_blocks_the_test_runs() -> None:
    """Cheap: the page's blocks exist and name what the test relies on."""
    build, use, down = blocks()
    assert "--plugin examples/own-agent" in build
    assert "BH_BRAIN_PLUGINS=greeter.tasks:plugin" in use
    assert "bh show greet-ada --json" in use.splitlines()[-1]
    assert "down --volumes" in down
