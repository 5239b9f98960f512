"""What a run printed is judged whole and the same way every time: the outcome does not
depend on when the log stream ends (issue 13, defect 15), and any output the Hands
cannot accept ends as ``invalid_output`` with the reason instead of an exception
(defect 16)."""

from __future__ import annotations

import asyncio
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from contracts.tool import DispatchMode, Limits, Termination, ToolDefinition
from hands.images import BASE_IMAGE
from hands.sandbox import RunSpec
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from tests.support.images import tool_images

pytestmark = pytest.mark.docker

RUNS = 12


@pytest.fixture(scope="module")
def base_image() -> str:
    return tool_images()[BASE_IMAGE]


@pytest.fixture
async def sandbox(base_image: str) -> AsyncIterator[DockerSandbox]:
    config = DockerSandboxConfig(owner=f"test-{uuid.uuid4().hex[:10]}", kill_grace=timedelta(1))
    box = DockerSandbox(config)
    await box.check()
    try:
        yield box
    finally:
        for run in await box.owned():
            await box.kill(run.operation_id, run.mode)
        await box.close()


def printing(image: str, code: str) -> ToolDefinition:
    return ToolDefinition(
        name="printer", version=1, image=BASE_IMAGE, image_id=image, command=("python3", "-c", code)
    )


async def run_many(sandbox: DockerSandbox, tool: ToolDefinition, count: int = RUNS) -> list[Any]:
    specs = [
        RunSpec(operation_id=f"o-{uuid.uuid4().hex[:12]}", session_id="s", tool=tool, args=n)
        for n in range(count)
    ]
    return list(await asyncio.gather(*(sandbox.run(spec) for spec in specs)))


@pytest.mark.parametrize("ending", ["", "\\n"], ids=["no_newline", "newline"])
async def test_one_json_document_is_read_whole_every_time(
    sandbox: DockerSandbox, base_image: str, ending: str
) -> None:
    code = (
        "import os, sys; sys.stdout.write('{\"n\": ' + os.environ['BH_ARGUMENTS'] + "
        f"', \"ok\": true}}{ending}')"
    )
    outcomes = await run_many(sandbox, printing(base_image, code))

    seen = [(o.termination, o.output) for o in outcomes]
    assert seen == [(Termination.EXITED, {"n": n, "ok": True}) for n in range(RUNS)]


async def test_bytes_that_are_not_utf8_are_invalid_output_every_time(
    sandbox: DockerSandbox, base_image: str
) -> None:
    code = "import sys; sys.stdout.buffer.write(b'\"\\xff\\xfe\"')"
    outcomes = await run_many(sandbox, printing(base_image, code), count=RUNS // 2)

    assert [o.termination for o in outcomes] == [Termination.INVALID_OUTPUT] * (RUNS // 2)
    assert all(o.output is None and "UTF-8" in o.detail for o in outcomes), outcomes[0]


async def test_output_nested_too_deep_is_invalid_output_with_the_reason(
    sandbox: DockerSandbox, base_image: str
) -> None:
    code = "import sys; print('[' * 400 + ']' * 400)"
    [outcome] = await run_many(sandbox, printing(base_image, code), count=1)

    assert outcome.termination is Termination.INVALID_OUTPUT and outcome.output is None
    assert "nested" in outcome.detail


async def test_a_large_stdout_under_the_limit_is_not_held_in_memory(
    sandbox: DockerSandbox, base_image: str
) -> None:
    size = 8 * 2**20
    tool = printing(base_image, f"import sys; sys.stdout.write('x' * {size})")
    tool = tool.model_copy(update={"limits": Limits(output_bytes=16 * 2**20)})
    spec = RunSpec(operation_id=f"o-{uuid.uuid4().hex[:12]}", session_id="s", tool=tool)

    tracemalloc.start()
    try:
        outcome = await sandbox.run(spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert outcome.termination is Termination.INVALID_OUTPUT and not outcome.truncated
    assert peak < size // 4, f"peak {peak:,} bytes while reading {size:,}"


async def test_a_query_that_never_returns_is_stopped_at_its_timeout(
    sandbox: DockerSandbox, base_image: str
) -> None:
    tool = printing(base_image, "print('{}')").model_copy(
        update={"query": ("python3", "-c", "import time; time.sleep(600)"), "timeout_s": 2.0}
    )
    spec = RunSpec(
        operation_id=f"o-{uuid.uuid4().hex[:12]}",
        session_id="s",
        tool=tool,
        mode=DispatchMode.QUERY,
    )

    outcome = await asyncio.wait_for(sandbox.run(spec), 30)

    assert outcome.termination is Termination.TIMEOUT and outcome.output is None
