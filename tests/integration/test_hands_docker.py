"""The Hands on real Docker: registering real images, and bad input that must end in a
clear result without crashing anything."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from contracts import AlreadyExists, InvalidInput, OperationStatus, utcnow
from contracts.tool import Dispatch, ResultEvent, ToolDefinition
from hands.executor import Executor
from hands.images import BASE_IMAGE, tool_tag
from hands.registry import register_image
from hands.sandbox import RunOutcome, RunSpec, RunState
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from hands.sandbox.output import Capture
from session_store import SessionStore, open_store
from tests.support.eventually import assert_eventually
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


def executor(
    store: SessionStore,
    sandbox: DockerSandbox,
    events: list[ResultEvent],
    name: str = "hands-docker",
) -> Executor:
    async def publish(event: ResultEvent) -> None:
        events.append(event)

    return CommittingExecutor(store=store, sandbox=sandbox, publish=publish, executor_id=name)


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


async def test_two_deployments_on_one_engine_run_the_same_operation_id_apart(
    tmp_path: Path, images: dict[str, str]
) -> None:
    """Operation ids are a function of (session, task, key): two deployments sharing an
    engine meet the same ids. Each one's container carries its namespace (name and
    labels), so both run, and neither's reaper touches the other's container."""
    deployments = []
    for name in ("a", "b"):
        store = await open_store(f"sqlite:///{tmp_path / f'{name}.db'}")
        owner = f"test-ns-{name}-{uuid.uuid4().hex[:8]}"
        box = DockerSandbox(DockerSandboxConfig(owner=owner, docker_url=DOCKER))
        await box.check()
        await register_image(store, box, tool_tag("sleep"))
        deployments.append((store, box, executor(store, box, [])))
    try:
        (_, box_a, hands_a), (_, box_b, hands_b) = deployments
        op = f"op-shared-{uuid.uuid4().hex[:8]}"
        run_a = asyncio.create_task(hands_a.handle(dispatch("sleep", {"seconds": 1.5}, op)))
        await assert_eventually(lambda: _running(box_a, op), within=30)

        result_b = await hands_b.handle(dispatch("sleep", {"seconds": 0}, op))
        touched_b = await hands_b.reconcile()
        # A's run was left alone: its container is still there (running, or ended on its
        # own while B ran: a loaded machine may take longer than 1.5 s for B's run) ...
        assert await box_a.state(op) in (RunState.RUNNING, RunState.EXITED)
        result_a = await run_a
        # ... and it ran once, to its end, never stopped and run again
        assert result_a is not None and result_a.path == "executed", result_a

        assert result_a is not None and result_b is not None
        assert (result_a.succeeded, result_b.succeeded) == (True, True), (result_a, result_b)
        assert result_a.output == {"slept": 1.5} and result_b.output == {"slept": 0}
        assert result_a.container != result_b.container
        assert box_a.config.owner in result_a.container
        assert box_b.config.owner in result_b.container
        assert touched_b == []
    finally:
        for store, box, _ in deployments:
            for run in await box.owned():
                await box.kill(run.operation_id, run.mode)
            await box.close()
            await store.close()


async def _running(box: DockerSandbox, op: str) -> bool:
    return await box.state(op) is RunState.RUNNING


async def test_a_run_stopped_from_outside_is_an_unknown_outcome_not_a_tool_failure(
    store: SessionStore, sandbox: DockerSandbox
) -> None:
    """The engine stopping (``dockerd`` restarted: SIGTERM to every container) or an
    operator's ``docker stop`` ends a run with 143 — a signal the Hands did not send.
    Whether its effect happened is unknown: recovered by the tool's policy (``sleep``
    is safe: run again), never recorded as the tool failing."""
    await register_image(store, sandbox, tool_tag("sleep"))
    handling = asyncio.create_task(
        executor(store, sandbox, []).handle(dispatch("sleep", {"seconds": 4}, op="op-stopped"))
    )
    client = docker.DockerClient(base_url=DOCKER)
    try:
        name = await _running_container_of(client, "op-stopped")
        await asyncio.to_thread(client.containers.get(name).stop, timeout=0)
    finally:
        client.close()
    result = await asyncio.wait_for(handling, 60)
    assert result is not None and result.succeeded, result
    assert result.output == {"slept": 4} and result.path == "replayed"
    record = await store.get_operation("op-stopped")
    assert record is not None and record.attempts == 2


async def _running_container_of(client: docker.DockerClient, operation_id: str) -> str:
    async def running() -> str:
        found = await asyncio.to_thread(
            client.containers.list, filters={"label": f"io.brainhands.operation={operation_id}"}
        )
        assert found, f"no running container of {operation_id} yet"
        return str(found[0].name)

    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await running()
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_two_hands_of_one_deployment_never_start_one_operation_twice(
    store: SessionStore, sandbox: DockerSandbox
) -> None:
    """Two Hands of one deployment on one engine: a redelivery reaches the second while
    the first runs the operation, and the first collects and removes the container
    between the second's look and its reconnect. The second only collects; the engine
    creates one container for the operation (the compose deployment sent an email
    twice this way)."""
    await register_image(store, sandbox, tool_tag("sleep"))
    op = f"op-twice-{uuid.uuid4().hex[:8]}"
    since = int(time.time()) - 1
    d = dispatch("sleep", {"seconds": 1}, op=op)
    first = asyncio.create_task(executor(store, sandbox, [], "hands-a").handle(d))
    await assert_eventually(lambda: _running(sandbox, op), within=30)

    class SameEngine(DockerSandbox):
        async def run(
            self, spec: RunSpec, *, log: Capture | None = None, guard: Any = None
        ) -> RunOutcome:
            await first  # the first Hands finishes before this one looks again
            return await super().run(spec, log=log, guard=guard)

    async with SameEngine(sandbox.config) as other:
        by_second = await executor(store, other, [], "hands-b").handle(d)
    by_first = await first
    assert by_first is not None and by_second is not None
    assert by_second.output == by_first.output == {"slept": 1}
    assert await _created(op, since) == 1


async def test_a_container_removed_under_its_hands_is_an_unknown_outcome(
    store: SessionStore, sandbox: DockerSandbox
) -> None:
    """``docker rm -f`` (or another Hands' reaper) while the Hands follows the run, with no
    cancellation recorded: the outcome is unknown and recovered by the tool's policy
    (``sleep`` is safe: run again), not recorded as a cancelled tool."""
    await register_image(store, sandbox, tool_tag("sleep"))
    op = f"op-removed-{uuid.uuid4().hex[:8]}"
    handling = asyncio.create_task(
        executor(store, sandbox, []).handle(dispatch("sleep", {"seconds": 3}, op=op))
    )
    client = docker.DockerClient(base_url=DOCKER)
    try:
        name = await _running_container_of(client, op)
        await asyncio.to_thread(client.containers.get(name).remove, force=True)
    finally:
        client.close()
    result = await asyncio.wait_for(handling, 60)
    assert result is not None and result.succeeded, result
    assert result.path == "replayed"


async def _created(operation_id: str, since: int) -> int:
    """How many containers the engine created for the operation's run since ``since``."""
    client = docker.APIClient(base_url=DOCKER)
    try:
        events = await asyncio.to_thread(
            lambda: list(
                client.events(
                    since=since,
                    until=int(time.time()) + 1,
                    decode=True,
                    filters={
                        "type": "container",
                        "event": "create",
                        "label": f"io.brainhands.operation={operation_id}",
                    },
                )
            )
        )
    finally:
        client.close()
    return sum(1 for e in events if e["Actor"]["Attributes"].get("io.brainhands.mode") == "run")


async def test_the_reaper_stops_an_overdue_warm_run_by_its_claims_deadline(
    store: SessionStore, images: dict[str, str]
) -> None:
    """A warm container bound to its operation by name carries no deadline label (labels
    are fixed when it is made): the reaper takes the deadline of the operation's claim,
    so a run whose Hands died is stopped once that passed, as a cold one is."""
    owner = f"test-warm-{uuid.uuid4().hex[:8]}"
    config = DockerSandboxConfig(owner=owner, docker_url=DOCKER, warm={"*": 1})
    async with DockerSandbox(config) as box:
        try:
            await register_image(store, box, tool_tag("sleep"))
            await executor(store, box, []).handle(dispatch("sleep", {"seconds": 0}, "op-warming"))
            await assert_eventually(lambda: _warm_ready(box), within=30)
            op = f"op-{uuid.uuid4().hex}"
            dead = asyncio.create_task(
                executor(store, box, [], "dead").handle(dispatch("sleep", {"seconds": 60}, op))
            )
            await assert_eventually(lambda: _running(box, op), within=30)
            dead.cancel()  # its Hands died; the container runs on
            with pytest.raises(asyncio.CancelledError):
                await dead
            [run] = [run for run in await box.owned() if run.operation_id == op]
            assert run.deadline is None  # bound by name: no label says until when

            reaper = executor(store, box, [], "b")
            assert await reaper.reconcile() == []  # within the claim: left alone
            reaper.clock = lambda: utcnow() + timedelta(hours=1)
            assert run.name in await reaper.reconcile()
            assert await box.state(op) is None
        finally:
            for run in await box.owned():
                await box.kill(run.operation_id, run.mode)


async def _warm_ready(box: DockerSandbox) -> bool:
    return any(box.pool._ready.values())
