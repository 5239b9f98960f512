"""The plugins image: a tiny package of the user's (a module with a ``plugin`` function)
installed offline into an image ``FROM brainhands/service``; it imports there, the image
still runs every role as the service user, and a second build is skipped."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from bh.plugin_image import build_plugin_image, plugin_sources, plugins_tag
from bh.service_image import build_service_image, service_tag
from hands.images import BUILD_HASH_LABEL, BuiltImage
from tests.support.images import require_docker
from tests.support.plugin_packages import tiny_package

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SERVICE_UID = 10001


def _in_thread(coroutine: Any) -> Any:
    with ThreadPoolExecutor(1) as pool:  # callers may be inside an event loop
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture
def engine() -> Iterator[Any]:
    require_docker()
    client = docker.from_env(timeout=120)
    # The service image as it is: built once (cached by its own hash); a checkout
    # change would rebuild it, which this test does not need.
    try:
        client.images.get(service_tag())
    except docker.errors.ImageNotFound:
        _in_thread(build_service_image(say=lambda _: None))
    yield client
    client.close()


@pytest.fixture
def name(engine: Any) -> Iterator[str]:
    """A repository of this test's own, removed afterwards (the service image stays)."""
    repository = f"bhtest/plugins-{uuid.uuid4().hex[:8]}"
    yield repository
    for tag in (plugins_tag(repository), f"{repository}:latest"):
        with contextlib.suppress(docker.errors.ImageNotFound):
            engine.images.remove(tag, noprune=False)


def _build(sources: list[Path], name: str, said: list[str] | None = None) -> BuiltImage:
    say = (said if said is not None else []).append
    built = _in_thread(build_plugin_image(sources, name=name, say=say))
    assert isinstance(built, BuiltImage)
    return built


def test_the_users_package_imports_in_an_image_that_still_runs_as_the_service_user(
    engine: Any, name: str, tmp_path: Path
) -> None:
    module = f"plug_{uuid.uuid4().hex[:8]}"
    sources = plugin_sources([tiny_package(tmp_path / "pkg", module, "plugged in")])
    said: list[str] = []
    built = _build(sources, name, said)
    assert not built.skipped and built.tag == plugins_tag(name)
    # no dependencies of its own: nothing to download, not even pip (the service's)
    assert not [line for line in said if "download" in line], said
    image = engine.images.get(built.tag)
    assert engine.images.get(f"{name}:latest").id == image.id == built.image_id
    assert image.attrs["Config"]["User"] == f"{SERVICE_UID}:{SERVICE_UID}"
    probe = f"import os, {module}; print({module}.plugin(), os.getuid())"
    said = engine.containers.run(
        built.tag, ["-c", probe], entrypoint="python3", network_disabled=True, remove=True
    )
    assert said.decode().split() == ["plugged", "in", str(SERVICE_UID)]
    usage = engine.containers.run(built.tag, ["brain", "--help"], remove=True).decode()
    assert "Usage: bh brain" in usage

    again = _build(sources, name)
    assert again.skipped and again.image_id == built.image_id
    assert image.labels[BUILD_HASH_LABEL] != engine.images.get(service_tag()).labels.get(
        BUILD_HASH_LABEL
    )
