"""The ``brainhands/service`` image, built offline from the debootstrap base and a
wheelhouse: it runs every role as a non-root user, says its version, is skipped when up
to date, and a role in it (the scheduler) becomes ready against the real Redis, NATS and
a store on a mounted volume."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker  # type: ignore[import-untyped]
import httpx
import pytest

from bh.service_image import build_service_image, project, service_tag
from hands.images import BUILD_HASH_LABEL
from tests.support.http_server import free_port
from tests.support.images import require_docker
from tests.support.services import require

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROLES = ("brain", "hands", "scheduler", "session-api", "hands-api")
SERVICE_UID = 10001


def _build() -> Any:
    with ThreadPoolExecutor(1) as pool:  # callers may be inside an event loop
        return pool.submit(asyncio.run, build_service_image(say=lambda _: None)).result()


@pytest.fixture(scope="module")
def image() -> str:
    require_docker()
    return str(_build().image_id)


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.from_env(timeout=60)
    yield client
    client.close()


def test_a_second_build_is_skipped(image: str) -> None:
    again = _build()
    assert again.skipped and again.image_id == image


def test_it_says_its_version_and_runs_as_a_user_of_its_own(image: str, engine: Any) -> None:
    version = engine.containers.run(image, ["--version"], remove=True).decode().strip()
    wanted = engine.images.get(image).labels[BUILD_HASH_LABEL]
    # the build id: the version and the image's build hash (runtime.build)
    assert version == f"brainhands {project()['version']}+{wanted.removeprefix('sha256:')[:12]}"
    user = engine.images.get(service_tag()).attrs["Config"]["User"]
    assert user == f"{SERVICE_UID}:{SERVICE_UID}"
    assert engine.images.get("brainhands/service:latest").id == image


def test_the_hands_firewall_has_its_iptables(image: str, engine: Any) -> None:
    """The Hands' egress firewall runs ``iptables`` in the engine's network namespace:
    the service image's base adds it to the tool images' debootstrap base."""
    version = engine.containers.run(image, ["--version"], entrypoint="iptables", remove=True)
    assert version.decode().startswith("iptables v1.8")


@pytest.mark.parametrize("role", ROLES)
def test_every_role_starts(image: str, engine: Any, role: str) -> None:
    usage = engine.containers.run(image, [role, "--help"], remove=True).decode()
    assert f"Usage: bh {role}" in usage


def test_the_scheduler_role_is_ready_against_the_real_servers(
    image: str, engine: Any, tmp_path: Path
) -> None:
    redis_url = require("BH_REDIS_URL", "Redis")
    nats_url = require("BH_NATS_URL", "NATS JetStream")
    # the services' credentials as files the service user can read (compose secrets)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for url in (redis_url, nats_url):
        source = Path(parse_qs(urlsplit(url).query)["passfile"][0])
        shutil.copy(source, secrets / source.name)
        os.chown(secrets / source.name, SERVICE_UID, SERVICE_UID)
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, SERVICE_UID, SERVICE_UID)
    probe = free_port()
    in_container = {
        str(Path(parse_qs(urlsplit(u).query)["passfile"][0]).parent): "/run/secrets"
        for u in (redis_url, nats_url)
    }
    environment = {
        "BH_STORE_URL": "sqlite:////data/store.db",
        "BH_REDIS_URL": _moved(redis_url, in_container),
        "BH_NATS_URL": _moved(nats_url, in_container),
        "BH_NAMESPACE": "svcimage",
        "BH_PROBE_PORT": str(probe),
    }
    container = engine.containers.run(
        image,
        ["scheduler"],
        detach=True,
        environment=environment,
        network_mode="host",  # the dev stack listens on this host's loopback
        volumes={
            str(secrets): {"bind": "/run/secrets", "mode": "ro"},
            str(data): {"bind": "/data", "mode": "rw"},
        },
    )
    try:
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline:
            container.reload()
            assert container.status != "exited", container.logs().decode()[-2000:]
            try:
                answer = httpx.get(f"http://127.0.0.1:{probe}/readyz", timeout=2)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert answer is not None and answer.status_code == 200, container.logs().decode()[-2000:]
        assert answer.json()["checks"] == {"store": "ok", "redis": "ok", "nats": "ok"}
    finally:
        container.remove(force=True)


def _moved(url: str, directories: dict[str, str]) -> str:
    for host_path, container_path in directories.items():
        url = url.replace(f"passfile={host_path}/", f"passfile={container_path}/")
    return url
