"""``DockerSandbox`` against a real Docker engine: runs end with a typed outcome, and a
run is started once — a later ``run`` of the same operation reconnects to the running
container or collects the exited one, and only the owner's containers are touched."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from contracts import InvalidInput, NotFound, PayloadTooLarge, StoreUnavailable
from contracts.tool import Limits, Termination, ToolDefinition
from hands.images import BASE_IMAGE
from hands.sandbox import LABEL_OWNER, RunSpec, RunState, container_name
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from tests.support.eventually import assert_eventually
from tests.support.http_server import free_port
from tests.support.images import tool_images

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def base_image() -> str:
    return tool_images()[BASE_IMAGE]


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.APIClient(timeout=120)
    yield client
    client.close()


@pytest.fixture
async def sandbox(base_image: str) -> AsyncIterator[DockerSandbox]:
    async with owned_sandbox() as box:
        yield box


class owned_sandbox:
    """A sandbox with an owner of its own; its containers are removed on exit."""

    def __init__(self, owner: str | None = None) -> None:
        owner = owner or f"test-{uuid.uuid4().hex[:10]}"
        config = DockerSandboxConfig(owner=owner, kill_grace=timedelta(seconds=1))
        self.box = DockerSandbox(config)

    async def __aenter__(self) -> DockerSandbox:
        await self.box.check()
        return self.box

    async def __aexit__(self, *exc: object) -> None:
        for run in await self.box.owned():
            await self.box.kill(run.operation_id, run.mode)
        await self.box.close()


def python_tool(image: str, code: str, **fields: Any) -> ToolDefinition:
    """A tool running ``python3 -c code`` in the base image."""
    return ToolDefinition(
        name="probe",
        version=1,
        image=BASE_IMAGE,
        image_id=image,
        command=("python3", "-c", code),
        **fields,
    )


def spec_of(tool: ToolDefinition, args: Any = None) -> RunSpec:
    return RunSpec(
        operation_id=f"t-{uuid.uuid4().hex[:12]}",
        session_id="s-1",
        tool=tool,
        args=args,
        executor="x-1",
    )


ECHO = (
    "import json, os, sys; print('to stderr', file=sys.stderr); print(os.environ['BH_ARGUMENTS'])"
)
# Prints a line, then waits for a while: long enough to be caught running.
SLOW = (
    "import sys, time; print('started', file=sys.stderr, flush=True); time.sleep(4); "
    "print('{\"done\": true}')"
)


async def test_a_run_exits_with_its_output(sandbox: DockerSandbox, base_image: str) -> None:
    outcome = await sandbox.run(spec_of(python_tool(base_image, ECHO), {"to": "a@b", "n": [1, 2]}))

    assert outcome.termination is Termination.EXITED
    assert (outcome.exit_code, outcome.output) == (0, {"to": "a@b", "n": [1, 2]})
    assert outcome.log_tail == "to stderr\n"
    assert not outcome.reconnected and not outcome.truncated
    assert outcome.started_at is not None and outcome.finished_at is not None


async def test_a_cold_run_asks_the_engine_little_around_create_and_start(
    sandbox: DockerSandbox, base_image: str
) -> None:
    """The Hands' own time around the engine (issue 17): a cold run creates (a taken
    name is what sends it to reconnect), starts, waits for the exit with the engine's
    own wait, and then reads the final state once, beside its two logs. It used to
    inspect before and after create, after start, and then poll until the exit (five
    inspects or more, 2-3 ms each, plus the tail of a follow it then read again)."""
    calls: dict[str, int] = {}
    api = sandbox._api
    for method in ("inspect_container", "wait", "logs", "create_container", "start"):
        calls[method] = 0
        setattr(api, method, _counting(calls, method, getattr(api, method)))
    sandbox._client = lambda *, pool: _counted_client(calls, sandbox.config.docker_url, pool)  # type: ignore[method-assign]
    outcome = await sandbox.run(spec_of(python_tool(base_image, ECHO), {"n": 1}))

    assert outcome.termination is Termination.EXITED and outcome.output == {"n": 1}
    assert calls["create_container"] == calls["start"] == 1
    assert calls["inspect_container"] == 1, calls
    assert calls["wait"] == 1, calls


def _counting(calls: dict[str, int], name: str, real: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    return counted


def _counted_client(calls: dict[str, int], url: str, pool: int) -> Any:
    """A client of its own (the waiter's, the log preview's), its calls counted too."""
    client = docker.APIClient(base_url=url, version="1.41", max_pool_size=pool)
    for method in ("inspect_container", "wait", "logs"):
        setattr(client, method, _counting(calls, method, getattr(client, method)))
    return client


async def test_a_non_zero_exit_keeps_its_json_output(
    sandbox: DockerSandbox, base_image: str
) -> None:
    code = 'import sys; print(\'{"error": "no such mailbox"}\'); sys.exit(3)'
    outcome = await sandbox.run(spec_of(python_tool(base_image, code)))

    assert (outcome.termination, outcome.exit_code) == (Termination.EXITED, 3)
    assert outcome.output == {"error": "no such mailbox"}


async def test_exit_zero_without_one_json_document_is_invalid_output(
    sandbox: DockerSandbox, base_image: str
) -> None:
    outcome = await sandbox.run(spec_of(python_tool(base_image, "print('{}'); print('[]')")))

    assert outcome.termination is Termination.INVALID_OUTPUT
    assert outcome.output is None and outcome.stdout_tail == "{}\n[]\n"


@pytest.mark.slow
async def test_a_run_whose_executor_died_is_reconnected_not_restarted(
    sandbox: DockerSandbox, base_image: str, engine: Any
) -> None:
    spec = spec_of(python_tool(base_image, SLOW))
    name = container_name(spec.operation_id, namespace=sandbox.config.owner)
    first = asyncio.create_task(sandbox.run(spec))
    await assert_eventually(lambda: _is(sandbox, spec, RunState.RUNNING), within=30)
    before = engine.inspect_container(name)
    first.cancel()  # the executor dies; its container does not
    with pytest.raises(asyncio.CancelledError):
        await first
    assert engine.inspect_container(name)["State"]["Running"]

    later = DockerSandbox(sandbox.config)  # a new executor, same deployment
    try:
        outcome = await later.run(spec)
    finally:
        await later.close()

    after = engine.inspect_container(name)
    assert outcome.termination is Termination.EXITED and outcome.output == {"done": True}
    assert outcome.reconnected
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    assert after["RestartCount"] == 0
    assert outcome.log_tail == "started\n"  # one start: the action ran once


@pytest.mark.slow
async def test_a_reconnected_run_keeps_the_timeout_of_its_first_start(
    sandbox: DockerSandbox, base_image: str
) -> None:
    spec = spec_of(python_tool(base_image, "import time; time.sleep(60)", timeout_s=3))
    first = asyncio.create_task(sandbox.run(spec))
    await assert_eventually(lambda: _is(sandbox, spec, RunState.RUNNING), within=30)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first

    outcome = await sandbox.run(spec)

    assert outcome.termination is Termination.TIMEOUT and outcome.reconnected
    assert outcome.started_at is not None and outcome.finished_at is not None
    ran = (outcome.finished_at - outcome.started_at).total_seconds()
    assert 3 <= ran < 3 + 1 + 5  # timeout + grace + a slow engine, not a fresh 3 s


async def test_an_exited_run_is_collected_without_running_again(
    sandbox: DockerSandbox, base_image: str, engine: Any
) -> None:
    spec = spec_of(python_tool(base_image, ECHO), {"k": 1})
    first = await sandbox.run(spec)
    started = engine.inspect_container(first.container)["State"]["StartedAt"]

    again = await sandbox.run(spec)

    assert again.reconnected and not first.reconnected
    assert (again.termination, again.output, again.log_tail) == (
        first.termination,
        first.output,
        first.log_tail,
    )
    assert engine.inspect_container(first.container)["State"]["StartedAt"] == started


FLOOD = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


@pytest.mark.parametrize(
    ("code", "fields", "termination"),
    [
        (FLOOD, {"limits": Limits(output_bytes=100_000)}, Termination.OUTPUT_LIMIT),
        pytest.param(DEAF, {"timeout_s": 2}, Termination.TIMEOUT, marks=pytest.mark.slow),
    ],
    ids=["output_limit", "timeout"],
)
async def test_a_collected_run_keeps_what_ended_it(
    sandbox: DockerSandbox,
    base_image: str,
    code: str,
    fields: dict[str, Any],
    termination: Termination,
) -> None:
    spec = spec_of(python_tool(base_image, code, **fields))
    first = await sandbox.run(spec)

    collected = await sandbox.run(spec)  # as an executor that died before reading it

    assert first.termination is collected.termination is termination
    assert collected.reconnected and collected.truncated is first.truncated
    assert collected.exit_code == first.exit_code == 137


async def test_a_created_but_never_started_container_is_started(
    sandbox: DockerSandbox, base_image: str
) -> None:
    spec = spec_of(python_tool(base_image, ECHO), {"k": 2})
    await sandbox._create(spec, sandbox._name(spec.operation_id, spec.mode), '{"k":2}')  # died
    assert await sandbox.state(spec.operation_id) is RunState.CREATED

    outcome = await sandbox.run(spec)

    assert outcome.reconnected and outcome.output == {"k": 2}


async def test_kill_removes_a_running_container(sandbox: DockerSandbox, base_image: str) -> None:
    spec = spec_of(python_tool(base_image, SLOW))
    running = asyncio.create_task(sandbox.run(spec))
    await assert_eventually(lambda: _is(sandbox, spec, RunState.RUNNING), within=30)

    assert await sandbox.kill(spec.operation_id)

    assert await sandbox.state(spec.operation_id) is None
    outcome = await asyncio.wait_for(running, 60)
    # Removed before its end was read, or read killed in the moment before removal.
    assert outcome.termination is Termination.CANCELLED or outcome.exit_code == 137
    assert await sandbox.kill(spec.operation_id)  # absent: certainly gone


async def test_owned_lists_only_this_owners_containers(
    sandbox: DockerSandbox, base_image: str
) -> None:
    mine = spec_of(python_tool(base_image, ECHO), 1)
    theirs = spec_of(python_tool(base_image, ECHO), 2)
    await sandbox.run(mine)
    async with owned_sandbox() as other:
        await other.run(theirs)

        listed = await sandbox.owned()

        assert [run.operation_id for run in listed] == [mine.operation_id]
        assert listed[0].state is RunState.EXITED and listed[0].session_id == "s-1"
        assert listed[0].labels[LABEL_OWNER] == sandbox.config.owner
        assert await sandbox.state(theirs.operation_id) is None  # not in our namespace
        assert await sandbox.kill(theirs.operation_id)  # absent here: theirs untouched
        assert await other.state(theirs.operation_id) is RunState.EXITED


async def test_a_name_held_by_a_container_not_ours_is_a_refusal_that_touches_nothing(
    sandbox: DockerSandbox, base_image: str, engine: Any
) -> None:
    spec = spec_of(python_tool(base_image, ECHO), 4)
    other = python_tool(base_image, SLOW).model_copy(update={"name": "other"})
    squatter = spec.model_copy(update={"tool": other})
    await sandbox._create(squatter, sandbox._name(spec.operation_id, spec.mode), "4")
    before = engine.inspect_container(sandbox._name(spec.operation_id, spec.mode))

    outcome = await sandbox.run(spec)

    assert outcome.termination is Termination.SANDBOX_ERROR and outcome.refused
    assert "is not this deployment's run" in outcome.detail and "other@1" in outcome.detail
    after = engine.inspect_container(before["Id"])
    assert after["State"]["Status"] == "created"  # not started, not removed


async def test_remove_is_for_ended_runs(sandbox: DockerSandbox, base_image: str) -> None:
    spec = spec_of(python_tool(base_image, ECHO), 3)
    await sandbox.run(spec)

    await sandbox.remove(spec.operation_id)
    await sandbox.remove(spec.operation_id)  # absent is fine

    assert await sandbox.state(spec.operation_id) is None


async def test_a_missing_image_is_not_found(sandbox: DockerSandbox, base_image: str) -> None:
    tool = python_tool(base_image, ECHO).model_copy(
        update={"image": "brainhands/absent:1", "image_id": "brainhands/absent:1"}
    )

    with pytest.raises(NotFound, match="brainhands/absent:1"):
        await sandbox.run(spec_of(tool))
    with pytest.raises(NotFound):
        await sandbox.image_id("brainhands/absent:1")


async def test_image_id_and_labels(sandbox: DockerSandbox, base_image: str) -> None:
    assert await sandbox.image_id(BASE_IMAGE) == base_image
    assert "io.brainhands.base" in await sandbox.image_labels(BASE_IMAGE)


async def test_arguments_too_large_are_refused_before_any_container(
    sandbox: DockerSandbox, base_image: str
) -> None:
    spec = spec_of(python_tool(base_image, ECHO), {"body": "x" * (64 * 1024)})

    with pytest.raises(PayloadTooLarge, match="65536"):
        await sandbox.run(spec)

    assert await sandbox.state(spec.operation_id) is None


async def test_egress_without_a_proxy_is_refused(sandbox: DockerSandbox, base_image: str) -> None:
    tool = python_tool(base_image, ECHO, network={"allow": ["example.com:443"]})

    with pytest.raises(InvalidInput, match="no egress proxy"):
        await sandbox.run(spec_of(tool))


async def test_an_absent_runtime_is_refused_clearly(base_image: str) -> None:
    box = DockerSandbox(DockerSandboxConfig(owner="test-runtime", runtime="no-such-runtime"))
    try:
        with pytest.raises(InvalidInput, match=r"no-such-runtime.*runc"):
            await box.check()
    finally:
        await box.close()


async def test_an_unreachable_engine_is_retryable() -> None:
    config = DockerSandboxConfig(owner="test-x", docker_url=f"tcp://127.0.0.1:{free_port()}")
    box = DockerSandbox(config)
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await box.state("op-1")
    finally:
        await box.close()
    assert raised.value.retryable


async def _is(sandbox: DockerSandbox, spec: RunSpec, state: RunState) -> bool:
    return await sandbox.state(spec.operation_id) is state
