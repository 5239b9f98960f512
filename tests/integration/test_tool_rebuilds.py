"""``bh up --example five-emails`` after the tool images were rebuilt (issue 14).

The example's registration (``bh.example_stack.register_tools``) runs twice with the
``send-email`` image rebuilt in between — from the same recipe on another base, as when
the debootstrap base is rebuilt — and must go on working; a changed recipe under the
same version is refused, and ``bh up`` says so in one line, not a traceback.

The builds here use a copy of the ``send-email`` recipe under a tag of their own, so the
shipped images other tests use are never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

import bh.granted_tool
from bh.example_stack import register_tools
from contracts import AlreadyExists
from contracts.tool import ToolChange
from hands.images import BASE_IMAGE, SANDBOX_IMAGES, BuiltImage, build_images, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import open_store
from tests.support.images import tool_images
from tests.support.processes import ROOT
from tests.support.sandboxed import DOCKER

# `bh up` serves on fixed ports: one such test at a time (side by side, on one worker)
pytestmark = [pytest.mark.docker, pytest.mark.sqlite, pytest.mark.xdist_group("bh-up")]


@dataclass
class Recipes:
    """A copy of the ``send-email`` recipe, built on demand under its own tag."""

    root: Path
    engine: Any
    name: str = field(default_factory=lambda: f"send-email-{uuid.uuid4().hex[:8]}")
    made: list[str] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        return self.root / "tools" / self.name

    @property
    def tag(self) -> str:
        return tool_tag(self.name)

    def change(self, line: str) -> None:
        with (self.directory / "tool.py").open("a") as file:
            file.write(line)

    async def build(self, base: str = BASE_IMAGE) -> BuiltImage:
        built = (await build_images(DOCKER, names=[self.name], root=self.root, base=base))[self.tag]
        self.made.append(built.image_id)
        return built

    def other_base(self) -> str:
        """An image like the base with another id: a rebuilt base, cheaply."""
        tag = f"brainhands/test-base:{self.name}"
        self.engine.images.build(
            fileobj=_dockerfile(f"FROM {BASE_IMAGE}\nLABEL io.brainhands.test={self.name}\n"),
            tag=tag,
            rm=True,
        )
        self.made.append(tag)
        return tag


def _dockerfile(text: str) -> io.BytesIO:
    return io.BytesIO(text.encode())


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    return tool_images()


@pytest.fixture
def recipes(images: dict[str, str], tmp_path: Path) -> Iterator[Recipes]:
    engine = docker.DockerClient(base_url=DOCKER)
    made = Recipes(tmp_path, engine)
    shutil.copytree(SANDBOX_IMAGES / "tools" / "send-email", made.directory)
    made.change(f"# a copy for {__name__} ({made.name})\n")  # unlike the shipped image
    try:
        yield made
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            engine.images.remove(made.tag)
        for image in reversed(made.made):
            with contextlib.suppress(docker.errors.DockerException):
                engine.images.remove(image)
        engine.close()


@pytest.fixture
def example_builds(recipes: Recipes, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``register_tools`` builds the copy (on the base named last) instead of the shipped
    recipe; the list holds the base of each next build."""
    bases = [BASE_IMAGE]

    async def build_copy(docker_url: str | None, **_: Any) -> dict[str, BuiltImage]:
        built = await recipes.build(bases[-1])
        return {tool_tag("send-email"): built}

    monkeypatch.setattr(bh.granted_tool, "build_images", build_copy)
    return bases


async def _history(store_url: str) -> list[Any]:
    store = await open_store(store_url, read_only=True)
    try:
        return await store.tools.history("send_email", 1)
    finally:
        await store.close()


async def test_the_example_registers_again_after_a_rebuilt_image(
    recipes: Recipes, example_builds: list[str], tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    assert await asyncio.to_thread(register_tools, store_url, DOCKER) == "send_email@1"
    example_builds.append(await asyncio.to_thread(recipes.other_base))
    assert await asyncio.to_thread(register_tools, store_url, DOCKER) == "send_email@1"
    first, rebuilt = recipes.made[0], recipes.made[-1]
    assert first != rebuilt
    history = await _history(store_url)
    assert [(r.change, r.definition.image_id) for r in history] == [
        (ToolChange.REGISTERED, first),
        (ToolChange.REBUILT, rebuilt),
    ]
    assert history[1].definition.network.allow == ("127.0.0.1:8025",)
    # and once more, nothing rebuilt: nothing changes
    assert await asyncio.to_thread(register_tools, store_url, DOCKER) == "send_email@1"
    assert len(await _history(store_url)) == 2


@pytest.fixture
async def sandbox(images: dict[str, str]) -> AsyncIterator[DockerSandbox]:
    async with DockerSandbox(
        DockerSandboxConfig(owner="test-tool-rebuilds", docker_url=DOCKER)
    ) as running:
        yield running


async def test_a_changed_recipe_under_the_same_version_is_refused(
    recipes: Recipes, sandbox: DockerSandbox, tmp_path: Path
) -> None:
    async with await open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        first = await register_image(store, sandbox, (await recipes.build()).image_id)
        recipes.change("# changed code, same version label\n")
        changed = await recipes.build()
        with pytest.raises(AlreadyExists) as refused:
            await register_image(store, sandbox, changed.image_id)
        assert await store.tools.get("send_email", 1) == first
    message = refused.value.message
    assert "\n" not in message and "another recipe" in message and "new version" in message


async def test_bh_up_says_why_it_refuses_in_one_line(
    recipes: Recipes, sandbox: DockerSandbox, tmp_path: Path
) -> None:
    """The store holds ``send_email@1`` from other code: ``bh up`` stops with one line."""
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    async with await open_store(store_url) as store:
        await register_image(store, sandbox, (await recipes.build()).image_id)
    env = {**os.environ, "BH_DEV_HOME": str(tmp_path / "dev"), "DOCKER_HOST": DOCKER}
    argv = [sys.executable, "-m", "bh.cli", "up", "--no-infra", "--example", "five-emails"]
    done = await asyncio.to_thread(
        subprocess.run,
        [*argv, "--store", store_url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith("already_exists: tool send_email@1")
    assert "new version" in lines[0]
