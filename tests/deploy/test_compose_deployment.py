"""The compose deployment (issue 14), for real: ``infra/compose`` with the images built on
this machine, under the chaos run's workload and the faults a fleet meets, judged by the
chaos run's invariants (``bh.chaos_check``): every session answered (or failed as the
workload asks), each operation run once, each result applied once, no stale-fence
commit.

One run: the deployment comes up (a project of its own: its network, volumes, egress
network and sandbox namespace; all removed afterwards), ``BH_DEPLOY_SESSIONS`` (50)
sessions of the chaos workload — agent sessions (the scripted model calls ``count`` on
the Hands, the five-emails batch in the Brain, ``count`` again) and task sessions
(sequential and fanned-out ``count`` calls, durable sleeps, a failing call) — are
submitted through the Session API while ``tests/deploy/faults.py`` scales Brains 2→4→1
and Hands 1→3→1, kills a Brain inside an email send and a Hands mid-run, partitions a
Brain past its lease and the Hands from NATS, stops a NATS node, restarts Redis and the
S3 server, and restarts every Brain in turn. ``BH_DEPLOY_ROUNDS`` repeats the faults
(the long version: docs/deploy-compose.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import httpx
import pytest

from bh.chaos import (
    MIN_SUCCEEDED,
    _workload,  # the chaos run's mix of sessions, reused as it is
    fails_by_design,
)
from bh.chaos_cancel import CancelStorms, request_of
from bh.chaos_check import check, fenced_in_logs
from bh.chaos_forge import Forger
from bh.chaos_report import ChaosReport, show
from bh.chaos_services import ChaosServices, chaos_services
from bh.deploy_secrets import SERVICE_GID
from bh.deploy_secrets import ensure as ensure_secrets
from bh.doctor import examine
from bh.granted_tool import destination, write_credentials
from bh.infra_images import build_infra_images
from bh.service_image import SERVICE_REPOSITORY
from hands.images import build_images, tool_tag
from session_store import SessionStore, open_store
from tests.deploy.deployment import Deployment
from tests.deploy.faults import Faults
from tests.deploy.relay import relaying
from tests.support.images import require_docker
from tests.support.services import free_ports, missing

SESSIONS = int(os.environ.get("BH_DEPLOY_SESSIONS", "50"))
ROUNDS = int(os.environ.get("BH_DEPLOY_ROUNDS", "1"))
SEED = int(os.environ.get("BH_DEPLOY_SEED", "1"))
#: seconds between two submissions (the workload spreads over the faults)
SPREAD = float(os.environ.get("BH_DEPLOY_SPREAD", "2.0"))
#: how long the sessions may take to settle once the faults are over
SETTLE = 240.0

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.docker,
    pytest.mark.slow,
    # a cold machine builds the images first (debootstrap: ~3 min); the run is ~5 min
    pytest.mark.timeout(900 * ROUNDS),
]


@pytest.fixture(scope="module")
def images() -> Iterator[str]:
    """The service, infrastructure and ``count`` images, built here (cached); the
    service image's version under a tag of this run's own (other builds on this engine
    retag ``brainhands/service:<version>`` meanwhile)."""
    require_docker()
    if shutil.which("docker-compose") is None:
        missing("docker-compose is not installed (scripts/install: apt-get install it)")
    if os.geteuid() != 0:
        missing("the deploy test runs as root (it builds root images, reads 0440 secrets)")
    started = time.monotonic()
    built = asyncio.run(build_infra_images(say=lambda _: None))
    asyncio.run(build_images(names=["count"]))
    print(f"deploy run: images built or found in {time.monotonic() - started:.0f} s")
    service = next(image for tag, image in built.items() if tag.startswith(SERVICE_REPOSITORY))
    version = f"deploy-{uuid.uuid4().hex[:8]}"
    client = docker.from_env()
    client.images.get(service.image_id).tag(SERVICE_REPOSITORY, version)
    try:
        yield version
    finally:
        client.images.remove(f"{SERVICE_REPOSITORY}:{version}")
        client.close()


async def test_the_compose_deployment_keeps_every_invariant_under_scaling_and_faults(
    images: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    project = f"bhd{uuid.uuid4().hex[:8]}"
    s3, nats, api, hands_api = free_ports(4)
    secrets = tmp_path / "secrets"
    ensure_secrets(secrets)
    async with chaos_services() as services:
        deployment = Deployment(project, {}, tmp_path)
        deployment.env = _compose_env(deployment, services, secrets, (s3, nats, api, hands_api))
        deployment.env["BH_VERSION"] = images
        gateway = await asyncio.to_thread(deployment.make_networks)
        try:
            async with (
                relaying(gateway, services.model_url) as (model_url, _),
                relaying(gateway, services.email_url) as (email_url, email_relay),
            ):
                deployment.env |= {"BH_MODEL_BASE_URL": f"{model_url}/v1"}
                deployment.env |= {"BH_EMAIL_SERVICE_URL": email_url}
                _declare_count(services, tmp_path / "tools.json", secrets)
                report = await _run(deployment, services, email_relay, monkeypatch, started)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(deployment.down)
            for left in await deployment.clean():
                print(f"deploy run: left behind: {left}")
    show(report)
    assert report.ok, "\n".join(report.violations)
    assert report.submitted == SESSIONS
    assert report.completed + len(report.failed) == SESSIONS, "every session answered"


async def _run(
    deployment: Deployment,
    services: ChaosServices,
    email_relay: Any,
    monkeypatch: pytest.MonkeyPatch,
    started: float,
) -> ChaosReport:
    report = ChaosReport(seed=SEED)
    up = time.monotonic()
    await asyncio.to_thread(deployment.up, brains=2, hands=1)
    for service, count in (("brain", 2), ("hands", 1), ("session-api", 1), ("hands-api", 1)):
        await deployment.healthy(service, count, within=240)
    came_up = time.monotonic() - up
    print(f"deploy run: images ready after {up - started:.0f} s, up in {came_up:.0f} s", flush=True)
    store = await _store(deployment, monkeypatch)
    api = f"http://127.0.0.1:{deployment.env['BH_SESSION_API_PUBLISH'].rsplit(':', 1)[1]}"
    token = _admin_token(deployment.env["BH_SECRETS"], "session-api.tokens")
    faults = Faults(deployment, services, email_relay)
    try:
        submitting = asyncio.create_task(_submit_all(api, token, report))
        for _ in range(ROUNDS):
            await _faults(faults)
        await submitting
        faulted = time.monotonic()
        await _settle(store, SESSIONS)
        settled = time.monotonic() - faulted
        await asyncio.to_thread(deployment.save_logs)
        report.schedule = faults.schedule
        report.violations += faults.violations
        report.fenced_refusals = await asyncio.to_thread(fenced_in_logs, deployment.work)
        await check(
            store,
            SESSIONS,
            Counter(services.tallies().requests),
            services.ledger(),
            report,
            forger=Forger(dict(os.environ), "bh", deployment.work),
            storms=CancelStorms(api, token, store),
            min_succeeded=MIN_SUCCEEDED,  # a run where everything errors is no pass
        )
        report.violations += await _doctor(deployment, api, token)
    finally:
        await store.close()
    print(
        f"deploy run: up in {came_up:.0f} s, faults over after {faulted - up:.0f} s, "
        f"settled {settled:.0f} s later; {len(faults.schedule)} faults; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    return report


async def _faults(faults: Faults) -> None:
    """Every fault once, with the workload running: the ones that need work in flight
    (a run, an email send) first, while the sessions are young; the rolling restart of
    every Brain while there are two (each takes a Brain's drain and a start), then the
    scale-up to four for the rest."""
    await asyncio.sleep(5)
    await faults.run("scale", lambda: faults.scale("hands", 3))
    await faults.run("kill_hands_mid_run", faults.kill_hands_mid_run)
    await faults.run("kill_brain_mid_tool", faults.kill_brain_mid_tool)
    await faults.run("rolling_restart_brains", faults.rolling_restart)
    await faults.run("scale", lambda: faults.scale("brain", 4))
    await faults.run("partition_hands", faults.partition_hands)
    await faults.run("partition_brain", faults.partition_brain)
    await faults.run("partition_schedulers", faults.partition_schedulers)
    await faults.run("stop_nats_node", faults.stop_nats_node)
    await faults.run("restart_redis", lambda: faults.restart("redis"))
    await faults.run("restart_s3", lambda: faults.restart("s3"))
    await faults.run("scale", lambda: faults.scale("hands", 1))
    await faults.run("scale", lambda: faults.scale("brain", 1))


async def _submit_all(api: str, token: str, report: ChaosReport) -> None:
    rng = random.Random(SEED)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as client:
        for number in range(SESSIONS):
            body = _workload(rng, number)
            if fails_by_design(body):
                report.meant_to_fail.add(f"s{number}")
            url = f"{api}/v1/sessions/s{number}/submissions"
            while True:  # the API may be unreachable a moment: the same request_id again
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.post(url, json=body)).status_code in (200, 201):
                        report.submitted += 1
                        break
                await asyncio.sleep(0.5)
            await asyncio.sleep(SPREAD)


async def _settle(store: SessionStore, sessions: int) -> None:
    """Until every submission is final, or ``SETTLE`` runs out (the check says which not)."""
    deadline = time.monotonic() + SETTLE
    pending = {f"s{n}" for n in range(sessions)}
    while pending and time.monotonic() < deadline:
        for session_id in sorted(pending):
            with contextlib.suppress(Exception):  # the store may be restarting
                submission = await (await store.session(session_id)).submission(
                    request_of(session_id)
                )
                if submission is not None and submission.status.is_final:
                    pending.discard(session_id)
        await asyncio.sleep(2)


def _compose_env(
    deployment: Deployment, services: ChaosServices, secrets: Path, ports: tuple[int, ...]
) -> dict[str, str]:
    s3, nats, api, hands_api = ports
    project = deployment.project
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
        "BH_SECRETS": str(secrets),
        "BH_TOOLS_FILE": str(deployment.work / "tools.json"),
        "BH_S3_PORT": str(s3),
        "BH_NATS_PORT": str(nats),
        "BH_SESSION_API_PUBLISH": f"127.0.0.1:{api}",
        "BH_HANDS_API_PORT": str(hands_api),
        "BH_MODEL_NAME": "scripted-chaos",
        "BH_MODEL_API_KEY": services.model_token,
        "BH_EMAIL_SERVICE_TOKEN": services.email_token,
        "BH_DEPLOY_NETWORK": f"{project}-net",
        "BH_OUTSIDE_NETWORK": f"{project}-outside",
        "BH_EGRESS_NETWORK": f"{project}-egress",
        "BH_HANDS_OWNER": project,
    }


def _declare_count(services: ChaosServices, tools: Path, secrets: Path) -> None:
    """``count`` granted the tally service (the Hands live on this host's network, so
    its loopback address is theirs), and the tally's token for the egress proxy."""
    entry = {
        "image": tool_tag("count"),
        "allow": [destination(services.tally_url)],
        "config": {"LEDGER_URL": services.tally_url},
    }
    tools.write_text(json.dumps({"tools": [entry]}))
    credentials = write_credentials(
        secrets / "hands.credentials", {services.tally_url: services.tally_token}
    )
    os.chown(credentials, 0, SERVICE_GID)
    credentials.chmod(0o440)


async def _store(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> SessionStore:
    """The deployment's store, read from here with its keys (the dev stack's dummy AWS
    keys in the environment would take precedence over the credentials file)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    credentials = Path(deployment.env["BH_SECRETS"]) / "store.credentials"
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    port = deployment.env["BH_S3_PORT"]
    return await open_store(
        f"s3://brainhands?endpoint_url=http://127.0.0.1:{port}&region=us-east-1"
    )


async def _doctor(deployment: Deployment, api: str, token: str) -> list[str]:
    """``bh doctor`` against the deployment after the run: both APIs, every Brain's probes
    (on the network outside, which only the Brains join), a probe session to its answer,
    the Hands API's metrics. Each failed check is a violation."""
    secrets = deployment.env["BH_SECRETS"]
    hands_api = f"http://127.0.0.1:{deployment.env['BH_HANDS_API_PORT']}"
    brains = await deployment.addresses(await deployment.found("brain"))
    probes = [f"http://{address}:8081" for address in brains]
    rows = await examine(
        api, token, hands_api, _admin_token(secrets, "hands-api.tokens"), probes, within=120
    )
    failed = [row for row in rows if not row.ok]
    print(f"deploy run: bh doctor: {len(rows) - len(failed)} of {len(rows)} checks passed")
    return [f"bh doctor: {row.check}: {row.detail}" for row in failed]


def _admin_token(secrets: str, name: str) -> str:
    document = json.loads((Path(secrets) / name).read_text())
    return str(document["tokens"][0]["token"])
