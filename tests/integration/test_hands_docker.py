"""The Hands on real Docker: registering real images, and bad input that must end in a
clear result without crashing anything."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import docker  # type: ignore[import-untyped]
import pytest

from contracts import AlreadyExists, InvalidInput, OperationStatus
from contracts.tool import Dispatch, ResultEvent, ToolDefinition
from hands.executor import Executor
from hands.images import BASE_IMAGE, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import SessionStore, open_store
from tests.support.images import tool_images
from tests.support.intents import CommittingExecutor
from tests.support.sandboxed import DOCKER

pytestmark = [pytest.mark.docker, pytest.mark.sqlite]


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    return tool_images()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield opened
    await opened.close()


@pytest.fixture
async def sandbox(images: dict[str, str]) -> AsyncIterator[DockerSandbox]:
    async with DockerSandbox(
        DockerSandboxConfig(owner="test-hands-docker", docker_url=DOCKER)
    ) as running:
        yield running


def executor(store: SessionStore, sandbox: DockerSandbox, events: list[ResultEvent]) -> Executor:
    async def publish(event: ResultEvent) -> None:
        events.append(event)

    return CommittingExecutor(
        store=store, sandbox=sandbox, publish=publish, executor_id="hands-docker"
    )


def dispatch(tool: str, args: object, op: str = "op-docker-1") -> Dispatch:
    return Dispatch(
        operation_id=op, session_id="s1", task_id="t1", tool=tool, tool_version=1, args=args
    )


async def test_registering_pins_the_image_and_a_version_means_one_image(
    store: SessionStore, sandbox: DockerSandbox, images: dict[str, str]
) -> None:
    definition = await register_image(store, sandbox, tool_tag("echo"))
    assert (definition.name, definition.version) == ("echo", 1)
    assert definition.image_id == images[tool_tag("echo")]
    assert definition.network.is_none and definition.replay.value == "safe"
    again = await register_image(store, sandbox, tool_tag("echo"))
    assert again == definition  # the same image again changes nothing
    other = await asyncio.to_thread(_rebuilt_echo)
    with pytest.raises(AlreadyExists, match="echo@1 is already registered"):
        await register_image(store, sandbox, other)
    assert [d.ref for d in await store.tools.definitions()] == ["echo@1"]


async def test_an_image_without_the_labels_is_refused_naming_the_label(
    store: SessionStore, sandbox: DockerSandbox
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await register_image(store, sandbox, BASE_IMAGE)
    assert refused.value.details["label"] == "io.brainhands.tool.schema"
    assert await store.tools.definitions() == []


async def test_a_missing_image_is_a_sandbox_error_result(
    store: SessionStore, sandbox: DockerSandbox
) -> None:
    gone = ToolDefinition(
        name="gone",
        version=1,
        image="brainhands/tool-gone:latest",
        image_id="sha256:" + "0" * 64,
    )
    await store.tools.register(gone)
    events: list[ResultEvent] = []
    result = await executor(store, sandbox, events).handle(dispatch("gone", {}))
    assert result is not None and not result.succeeded and result.error is not None
    assert result.termination == "sandbox_error" and "brainhands/tool-gone" in result.error.message
    record = await store.get_operation("op-docker-1")
    assert record is not None and record.status is OperationStatus.FAILED
    assert [e.operation_id for e in events] == ["op-docker-1"]


@pytest.mark.parametrize(
    ("args", "termination", "exit_code", "code"),
    [
        ({"action": "garbage"}, "invalid_output", 0, "invalid_output"),
        ({"action": "exit", "code": 3}, "exited", 3, "tool_failed"),
    ],
)
async def test_a_misbehaving_tool_gets_a_clear_result(
    store: SessionStore,
    sandbox: DockerSandbox,
    args: dict[str, object],
    termination: str,
    exit_code: int,
    code: str,
) -> None:
    await register_image(store, sandbox, tool_tag("misbehave"))
    result = await executor(store, sandbox, []).handle(dispatch("misbehave", args))
    assert result is not None and not result.succeeded and result.error is not None
    assert (result.termination, result.exit_code, result.error.code) == (
        termination,
        exit_code,
        code,
    )
    assert await sandbox.state("op-docker-1") is None  # collected, then removed


def _rebuilt_echo() -> str:
    """An image with echo's labels (name echo, version 1) but other content."""
    client = docker.DockerClient(base_url=DOCKER)
    try:
        recipe = f"FROM {tool_tag('echo')}\nLABEL io.brainhands.test=other\n"
        image, _ = client.images.build(
            fileobj=io.BytesIO(recipe.encode()), tag="bh-test/echo-other"
        )
        return str(image.id)
    finally:
        client.close()
