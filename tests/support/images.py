"""Tool images for tests that run containers: built once per test session.

``tool_images()`` needs a Docker engine like every real service in this suite: locally a
missing engine (or a missing base image that cannot be built here) skips the test, under
``CI=true`` it fails it. The build itself skips every image that is already up to date
(``hands.images`` compares build hashes), so a warm session pays a few inspections.

Use it from a session-scoped fixture::

    @pytest.fixture(scope="session")
    def images() -> dict[str, str]:
        return tool_images()

    def test_x(images):  images[tool_tag("echo")]  # → image id
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn
from urllib.parse import urlsplit

import docker  # type: ignore[import-untyped]
import pytest
import requests

from hands.images import BASE_IMAGE, build_images
from tests.support.services import in_ci

#: Flags of a hardened run, for ``client.containers.run`` (what the executor applies).
HARDENED = {
    "read_only": True,
    "tmpfs": {"/tmp": "size=8m"},
    "user": "65534:65534",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "network_mode": "none",
}


def tool_images() -> dict[str, str]:
    """Tag → image id of the base and every tool image; skips (CI: fails) without Docker."""
    require_docker()
    return dict(_built())


def require_docker() -> None:
    """Skip (CI: fail) unless a Docker engine answers and the base image can be had."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    hint = "start one with `bh dev up --require docker`"
    # Probed with a plain socket first: the docker SDK leaks one when the engine is absent.
    if not _answers(host):
        _missing(f"no Docker engine at {host}; {hint}")
    try:
        client = docker.from_env(timeout=10)
    except (docker.errors.DockerException, requests.RequestException) as error:
        _missing(f"the Docker engine at {host} does not answer ({error}); {hint}")
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        if os.geteuid() != 0 or shutil.which("debootstrap") is None:
            _missing(f"{BASE_IMAGE} is missing and only root with debootstrap can build it")
    finally:
        client.close()


@functools.cache
def _built() -> dict[str, str]:
    # A thread of its own: callers may already be inside an event loop.
    with ThreadPoolExecutor(1) as pool:
        built = pool.submit(asyncio.run, build_images()).result()
    return {tag: image.image_id for tag, image in built.items()}


def _answers(host: str) -> bool:
    parts = urlsplit(host)
    try:
        if parts.scheme in ("unix", "http+unix"):
            with socket.socket(socket.AF_UNIX) as probe:
                probe.settimeout(2)
                probe.connect(parts.path)
        elif parts.scheme in ("tcp", "http", "https"):
            address = (parts.hostname or "127.0.0.1", parts.port or 2375)
            socket.create_connection(address, timeout=2).close()
    except OSError:
        return False
    return True


def _missing(message: str) -> NoReturn:
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def run_hardened(
    image: str,
    arguments: object,
    *,
    operation_id: str = "op-1",
    mode: str = "run",
    environment: dict[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``image`` once with the hardening flags and the I/O contract's environment;
    its exit status and stdout (stderr is left out, as the contract's logs)."""
    env = {
        "BH_OPERATION_ID": operation_id,
        "BH_MODE": mode,
        "BH_ARGUMENTS": json.dumps(arguments),
        **(environment or {}),
    }
    client = docker.from_env(timeout=60)
    try:
        container = client.containers.run(image, detach=True, environment=env, **HARDENED)
        try:
            status = int(container.wait(timeout=60)["StatusCode"])
            return status, container.logs(stdout=True, stderr=False).decode()
        finally:
            container.remove(force=True)
    finally:
        client.close()
