"""Warm one-shot sandboxes against a real Docker engine: a run takes a container that
was created and started before it (hardened the same), binds it by name before its job
is written, and ends with the same outcome a cold run would have; a warm container
serves exactly one operation; a Hands that died after binding leaves an outcome the
next one can tell — the tool never started, or it ran and is collected."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from contracts.tool import Limits, Termination, ToolDefinition
from hands.images import BASE_IMAGE
from hands.sandbox import LABEL_POOL, RunSpec, container_name
from hands.sandbox.bootstrap import NEVER_BOUND
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from hands.sandbox.pool import pool_key
from tests.integration.test_sandbox_docker import ECHO, SLOW, python_tool
from tests.support.eventually import assert_eventually
from tests.support.images import tool_images

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def base_image() -> str:
    return tool_images()[BASE_IMAGE]


@pytest.fixture
async def sandbox() -> AsyncIterator[DockerSandbox]:
    owner = f"test-{uuid.uuid4().hex[:10]}"
    config = DockerSandboxConfig(owner=owner, kill_grace=timedelta(seconds=1), warm={"*": 1})
    box = DockerSandbox(config)
    await box.check()
    try:
        yield box
    finally:
        for run in await box.owned():
            await box.kill(run.operation_id, run.mode)
        await box.close()
        engine = docker.APIClient(version="1.41")
        left = engine.containers(all=True, filters={"label": f"io.brainhands.owner={owner}"})
        engine.close()
        assert not left, f"containers left behind: {[row['Names'] for row in left]}"


def spec_of(tool: ToolDefinition, args: Any = None) -> RunSpec:
    return RunSpec(
        operation_id=f"op-{uuid.uuid4().hex}", session_id="s-1", tool=tool, args=args, executor="x"
    )


async def _warmed(sandbox: DockerSandbox, tool: ToolDefinition) -> str:
    """Fill the pool of ``tool`` (a first run does) and return the warm container's id."""
    if not sandbox.pool._ready.get(pool_key(tool)):
        await sandbox.run(spec_of(tool, {"warming": True}))
    await assert_eventually(lambda: _ready(sandbox, tool), within=30)
    return sandbox.pool._ready[pool_key(tool)][0].id


async def _ready(sandbox: DockerSandbox, tool: ToolDefinition) -> bool:
    return bool(sandbox.pool._ready.get(pool_key(tool)))


async def test_a_warm_run_ends_as_a_cold_one_would(sandbox: DockerSandbox, base_image: str) -> None:
    tool = python_tool(base_image, ECHO)
    warm = await _warmed(sandbox, tool)
    spec = spec_of(tool, {"to": "a@b", "n": [1, 2]})
    before = datetime.now(UTC)

    outcome = await sandbox.run(spec)

    assert outcome.termination is Termination.EXITED
    assert (outcome.exit_code, outcome.output) == (0, {"to": "a@b", "n": [1, 2]})
    assert outcome.log_tail == "to stderr\n"  # the bootstrap's marks taken off
    assert outcome.container == container_name(spec.operation_id, namespace=sandbox.config.owner)
    engine = docker.APIClient(version="1.41")
    try:
        container = engine.inspect_container(outcome.container)
    finally:
        engine.close()
    assert container["Id"] == warm  # the pool's container, bound by its name
    assert datetime.fromisoformat(container["Created"][:26] + "+00:00") < before
    assert container["Config"]["Labels"][LABEL_POOL] == pool_key(tool)
    assert "BH_ARGUMENTS" not in str(container["Config"]["Env"])  # the job came on stdin
    assert outcome.started_at is not None and outcome.started_at >= before - timedelta(seconds=1)


@pytest.mark.parametrize(
    ("code", "termination", "exit_code", "output", "stderr"),
    [
        (
            'import sys; print(\'{"error": "x"}\'); sys.exit(3)',
            Termination.EXITED,
            3,
            {"error": "x"},
            "",
        ),
        ("print('{}'); print('[]')", Termination.INVALID_OUTPUT, 0, None, ""),
        ("import sys; sys.exit('no mailbox')", Termination.EXITED, 1, None, "no mailbox\n"),
        ("raise ValueError('bad')", Termination.EXITED, 1, None, "ValueError: bad\n"),
        (
            "import sys; sys.stdout.write('{\"partial\": 1}')",
            Termination.EXITED,
            0,
            {"partial": 1},
            "",
        ),
    ],
)
async def test_a_warm_run_keeps_exit_codes_output_and_errors(
    sandbox: DockerSandbox,
    base_image: str,
    code: str,
    termination: Termination,
    exit_code: int,
    output: Any,
    stderr: str,
) -> None:
    tool = python_tool(base_image, code)
    await _warmed(sandbox, tool)

    outcome = await sandbox.run(spec_of(tool))

    assert (outcome.termination, outcome.exit_code, outcome.output) == (
        termination,
        exit_code,
        output,
    )
    assert outcome.log_tail.endswith(stderr)
    assert "bh-warm" not in outcome.log_tail + outcome.stdout_tail


async def test_a_warm_container_serves_one_operation_and_the_pool_is_refilled(
    sandbox: DockerSandbox, base_image: str
) -> None:
    tool = python_tool(base_image, ECHO)
    first = await _warmed(sandbox, tool)
    await sandbox.run(spec_of(tool, 1))
    second = await _warmed(sandbox, tool)
    assert second != first
    await sandbox.run(spec_of(tool, 2))
    assert await _warmed(sandbox, tool) not in (first, second)


@pytest.mark.parametrize(
    ("code", "fields", "termination"),
    [
        (
            "import sys\nwhile True: sys.stdout.write('x' * 65536)",
            {"limits": Limits(output_bytes=100_000)},
            Termination.OUTPUT_LIMIT,
        ),
        ("import time; time.sleep(60)", {"timeout_s": 2}, Termination.TIMEOUT),
    ],
)
async def test_a_warm_run_is_held_to_its_output_cap_and_timeout(
    sandbox: DockerSandbox,
    base_image: str,
    code: str,
    fields: dict[str, Any],
    termination: Termination,
) -> None:
    tool = python_tool(base_image, code, **fields)
    await _warmed(sandbox, tool)

    outcome = await sandbox.run(spec_of(tool))

    assert outcome.termination is termination


async def test_a_warm_container_bound_but_never_given_its_job_gets_it_from_the_next(
    sandbox: DockerSandbox, base_image: str
) -> None:
    """The executor died between the rename and writing the job: the next one finds
    the container by the run's name, sees no bound mark, and writes the job itself —
    the tool runs once."""
    tool = python_tool(base_image, ECHO)
    spec = spec_of(tool, {"k": 1})
    await _bound_by_a_dead_executor(sandbox, tool, spec)
    listed = [run.operation_id for run in await sandbox.owned()]
    assert spec.operation_id in listed  # the reaper sees it as the run it is

    outcome = await sandbox.run(spec)

    assert outcome.reconnected and outcome.termination is Termination.EXITED
    assert outcome.output == {"k": 1} and outcome.log_tail == "to stderr\n"


async def test_a_warm_container_whose_job_was_cut_short_certainly_never_ran(
    sandbox: DockerSandbox, base_image: str
) -> None:
    """The executor died while writing the job: the container's stdin closed with its
    connection, the bootstrap found the job cut short and exited without starting the
    tool. The next executor is told so for certain (refused: it may start it again)."""
    tool = python_tool(base_image, ECHO)
    spec = spec_of(tool, {"k": 1})
    container_id = await _bound_by_a_dead_executor(sandbox, tool, spec)
    engine = docker.APIClient(version="1.41")
    try:
        attached = engine.attach_socket(container_id, params={"stdin": 1, "stream": 1})
        attached._sock.sendall(b'{"operation": "op-')  # and the executor dies
        attached._sock.close()
        attached.close()
        assert engine.wait(container_id, timeout=30)["StatusCode"] == NEVER_BOUND
    finally:
        engine.close()

    outcome = await sandbox.run(spec)

    assert outcome.refused and outcome.termination is Termination.SANDBOX_ERROR
    assert "never started" in outcome.detail


async def _bound_by_a_dead_executor(
    sandbox: DockerSandbox, tool: ToolDefinition, spec: RunSpec
) -> str:
    warm = await _warmed(sandbox, tool)
    taken, _ = sandbox.pool.take(pool_key(tool))
    assert taken is not None and taken.id == warm
    assert await sandbox.warm.bind(taken, sandbox._name(spec.operation_id, spec.mode)) == "bound"
    return warm


async def test_a_warm_run_whose_executor_died_is_collected_not_restarted(
    sandbox: DockerSandbox, base_image: str
) -> None:
    tool = python_tool(base_image, SLOW)
    await _warmed(sandbox, tool)
    spec = spec_of(tool)
    first = asyncio.create_task(sandbox.run(spec))
    await assert_eventually(lambda: _bound_and_started(sandbox, spec), within=30)
    first.cancel()  # the executor dies; its container does not
    with pytest.raises(asyncio.CancelledError):
        await first

    later = DockerSandbox(sandbox.config)  # a new executor, same deployment
    try:
        outcome = await later.run(spec)
    finally:
        await later.close()

    assert outcome.reconnected and outcome.termination is Termination.EXITED
    assert outcome.output == {"done": True}
    assert outcome.log_tail == "started\n"  # one start, marks taken off


async def _bound_and_started(sandbox: DockerSandbox, spec: RunSpec) -> bool:
    engine = docker.APIClient(version="1.41")
    try:
        name = container_name(spec.operation_id, namespace=sandbox.config.owner)
        return b"started" in engine.logs(name, stdout=False, stderr=True)
    except docker.errors.NotFound:
        return False
    finally:
        engine.close()


async def test_a_warm_container_that_died_in_the_pool_gives_way_to_a_cold_start(
    sandbox: DockerSandbox, base_image: str
) -> None:
    """An engine restart (or its idle limit) stopped the warm container before any run
    took it: the run that binds it finds it never got its job, removes it and starts
    cold — the operation runs once, and no failure is made of it."""
    tool = python_tool(base_image, ECHO)
    warm = await _warmed(sandbox, tool)
    engine = docker.APIClient(version="1.41")
    try:
        engine.stop(warm, timeout=0)
    finally:
        engine.close()

    outcome = await sandbox.run(spec_of(tool, {"k": 2}))

    assert outcome.termination is Termination.EXITED and outcome.output == {"k": 2}
    assert not outcome.refused and not outcome.reconnected
