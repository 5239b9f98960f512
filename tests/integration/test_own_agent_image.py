"""The own-agent example's ``letter_count`` image on real Docker: built from
``examples/own-agent/tool`` as its README says (``docker build``, the default ``BASE``)
under a tag of this test's own, registered from its labels, and run once by a Hands on
the Docker sandbox for a ``greet`` session."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import docker  # type: ignore[import-untyped]
import pytest

from hands.images import build_base
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from tests.support.images import require_docker
from tests.support.kernel import kernel
from tests.support.own_agent import EXAMPLE, greet, greeted, load_greeter, ran_once
from tests.support.sandboxed import DOCKER

pytestmark = [pytest.mark.docker, pytest.mark.sqlite]

TAG = "bh-test/greeter-letter-count:1"


@pytest.fixture(scope="module")
def image() -> str:
    """``docker build -t TAG examples/own-agent/tool`` on the base ``bh images build``
    makes; the image id."""
    require_docker()
    asyncio.run(build_base(DOCKER))  # up to date: one inspection
    client = docker.DockerClient(base_url=DOCKER)
    try:
        built, _ = client.images.build(path=str(EXAMPLE / "tool"), tag=TAG, rm=True)
        return str(built.id)
    finally:
        client.close()


@pytest.fixture
async def sandbox() -> AsyncIterator[DockerSandbox]:
    owner = f"test-own-agent-{uuid.uuid4().hex[:8]}"
    async with DockerSandbox(DockerSandboxConfig(owner=owner, docker_url=DOCKER)) as running:
        yield running


async def test_the_image_registers_from_its_labels_and_counts_for_a_greet_session(
    image: str, sandbox: DockerSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with kernel(tmp_path) as k, AsyncExitStack() as resources:
        definition = await register_image(k.store, sandbox, TAG)
        assert (definition.ref, definition.image_id) == ("letter_count@1", image)
        assert definition.network.is_none and definition.limits.memory_bytes == 32 * 2**20
        await load_greeter(k, monkeypatch, resources, definition)
        done = await greet(k, sandbox, "Ada")
        assert done.result == greeted("Ada")
        await ran_once(k, "shout", "count")
