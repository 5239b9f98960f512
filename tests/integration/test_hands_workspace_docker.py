"""The coding assistant's loop on the Hands with real Docker: each call of the shipped
``edit_file`` tool, and of the ``shell`` tool declared ``rw``, mounts the session's
workspace from the version the previous call produced — write a package, run its tests
(they fail), fix the file, run them again (they pass) — and the store holds every
version's files."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts import OperationResult
from contracts.tool import Dispatch, ResultEvent
from contracts.workspace import EntryKind, WorkspaceMode, WorkspaceMount, WorkspaceVersion
from hands.executor import Executor
from hands.images import tool_tag
from hands.registry import read_image, register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from hands.workspace.flow import WorkspaceFlow, sandbox_owner
from hands.workspace.store import versions_of
from session_store import SessionStore, open_store
from tests.support.images import tool_images
from tests.support.intents import CommittingExecutor
from tests.support.sandboxed import DOCKER

pytestmark = [pytest.mark.docker, pytest.mark.sqlite]

TESTS = """import unittest
from pkg.calc import add

class AddTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""
UNITTEST = "python3 -m unittest discover -s tests"


@pytest.fixture
async def hands(tmp_path: Path) -> AsyncIterator[tuple[SessionStore, Executor]]:
    tool_images()
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    owner = f"test-ws-{uuid.uuid4().hex[:8]}"
    async with DockerSandbox(DockerSandboxConfig(owner=owner, docker_url=DOCKER)) as sandbox:
        edit = await register_image(store, sandbox, tool_tag("edit-file"))
        shell = (await read_image(sandbox, tool_tag("shell"))).definition
        await store.tools.register(shell.model_copy(update={"workspace": edit.workspace}))
        flow = WorkspaceFlow(versions_of(store), root=tmp_path / "ws", owner=sandbox_owner())

        async def publish(_: ResultEvent) -> None:
            pass

        yield (
            store,
            CommittingExecutor(
                store=store, sandbox=sandbox, publish=publish, executor_id="ws", workspaces=flow
            ),
        )
    await store.close()


class Session:
    """Plays the Brain: each call starts from the version the last one produced."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.head: WorkspaceVersion | None = None
        self.calls = 0

    async def call(self, tool: str, **args: Any) -> OperationResult:
        self.calls += 1
        dispatch = Dispatch(
            operation_id=f"op-{self.calls}",
            session_id="s1",
            task_id="t1",
            tool=tool,
            tool_version=1,
            args=args,
            workspace=WorkspaceMount(mode=WorkspaceMode.WRITE, base=self.head),
        )
        result = await self.executor.handle(dispatch)
        assert result is not None and result.version is not None, result
        assert result.version.base == (self.head.id if self.head else None)
        self.head = result.version
        return result


async def test_write_a_package_run_its_failing_tests_fix_it_and_run_them_again(
    hands: tuple[SessionStore, Executor],
) -> None:
    store, executor = hands
    session = Session(executor)
    await session.call("edit_file", path="pkg/__init__.py", content="")
    await session.call(
        "edit_file", path="pkg/calc.py", content="def add(a, b):\n    return a - b\n"
    )
    await session.call("edit_file", path="tests/test_calc.py", content=TESTS)
    failing = await session.call("shell", command=UNITTEST)
    assert isinstance(failing.output, dict) and failing.output["exit_code"] == 1
    assert "FAILED (failures=1)" in failing.output["stderr"]
    await session.call("edit_file", path="pkg/calc.py", old="a - b", new="a + b")
    passing = await session.call("shell", command=UNITTEST + " 2>&1")
    assert isinstance(passing.output, dict) and passing.output["exit_code"] == 0, passing.output
    assert "OK" in passing.output["stdout"]
    assert session.head is not None
    versions = versions_of(store)
    manifest = await versions.manifest(session.head)
    files = {
        entry.path: (await versions.file(entry)).decode()
        for entry in manifest.entries
        if entry.kind is EntryKind.FILE
    }
    assert files == {
        "pkg/__init__.py": "",
        "pkg/calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": TESTS,
    }
