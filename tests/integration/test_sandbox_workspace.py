"""A run's workspace in a real Docker container (``docs/hardening.md``): the tree is
bind-mounted at the tool's path — really read-only for an ``ro`` tool, writable by the
sandbox user (uid 65534) for ``rw`` — beside an empty artifacts directory, and those two
are the only mounts a run gets beyond a run that mounts nothing; a device file cannot be
made in it."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from contracts.tool import Termination, ToolDefinition
from contracts.workspace import WorkspaceAccess, WorkspaceMode
from hands.images import tool_tag
from hands.labels import definition_from_labels
from hands.sandbox import RunSpec
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from hands.workspace.mount import ARTIFACTS_MOUNT, RunMount
from tests.support.images import tool_images

pytestmark = pytest.mark.docker

PROBE = """
import json, os, stat
ws, art = os.environ.get("BH_WORKSPACE"), os.environ.get("BH_ARTIFACTS")
out = {"uid": os.getuid(), "cwd": os.getcwd()}
out["mounts"] = sorted({line.split()[4] for line in open("/proc/self/mountinfo")})
if ws:
    out["seen"] = open(os.path.join(ws, "given.txt")).read()
    try:
        with open(os.path.join(ws, "made.txt"), "w") as made:
            made.write("made inside")
        out["wrote"] = 0
    except OSError as error:
        out["wrote"] = error.errno
    try:
        os.mknod(os.path.join(ws, "null"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        out["mknod"] = 0
    except OSError as error:
        out["mknod"] = error.errno
    with open(os.path.join(art, "report.txt"), "w") as report:
        report.write("published")
print(json.dumps(out))
"""
SANDBOX_UID = 65534


@pytest.fixture(scope="module")
def prober() -> ToolDefinition:
    image_id = tool_images()[tool_tag("shell")]
    client = docker.APIClient(timeout=60)
    try:
        labels = client.inspect_image(image_id)["Config"]["Labels"]
    finally:
        client.close()
    shell = definition_from_labels(tool_tag("shell"), image_id, labels)
    return shell.model_copy(update={"command": ("python3", "-c", PROBE)})


@pytest.fixture
async def sandbox() -> AsyncIterator[DockerSandbox]:
    owner = f"test-{uuid.uuid4().hex[:10]}"
    box = DockerSandbox(DockerSandboxConfig(owner=owner, kill_grace=timedelta(seconds=1)))
    await box.check()
    yield box
    for run in await box.owned():
        await box.remove(run.operation_id, run.mode)
    await box.close()


def mount_in(tmp_path: Path, mode: WorkspaceMode) -> RunMount:
    """A run's directories as the Hands make them: owned by the sandbox user."""
    if os.geteuid() != 0:
        pytest.skip("the Hands give the tree to the sandbox user: root only")
    tree, artifacts = tmp_path / "tree", tmp_path / "artifacts"
    tree.mkdir()
    artifacts.mkdir()
    (tree / "given.txt").write_text("from the base version")
    for path in (tree, artifacts, tree / "given.txt"):
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return RunMount(mode=mode, path="/workspace", tree=tree, artifacts=artifacts)


async def probe(
    sandbox: DockerSandbox, tool: ToolDefinition, mount: RunMount | None
) -> dict[str, Any]:
    access = WorkspaceAccess(mode=mount.mode) if mount else WorkspaceAccess()
    spec = RunSpec(
        operation_id=f"w-{uuid.uuid4().hex[:12]}",
        session_id="s-w",
        tool=tool.model_copy(update={"workspace": access}),
        workspace=mount,
    )
    outcome = await sandbox.run(spec)
    assert outcome.termination is Termination.EXITED and outcome.exit_code == 0, outcome
    assert isinstance(outcome.output, dict), outcome
    return outcome.output


async def test_a_rw_workspace_is_writable_by_the_sandbox_user_and_the_only_extra_mounts(
    sandbox: DockerSandbox, prober: ToolDefinition, tmp_path: Path
) -> None:
    mount = mount_in(tmp_path, WorkspaceMode.WRITE)
    bare = await probe(sandbox, prober, None)
    inside = await probe(sandbox, prober, mount)
    assert inside["uid"] == SANDBOX_UID and inside["cwd"] == "/workspace"
    assert inside["seen"] == "from the base version"
    assert inside["wrote"] == 0
    made = mount.tree / "made.txt"
    assert made.read_text() == "made inside" and made.stat().st_uid == SANDBOX_UID
    assert (mount.artifacts / "report.txt").read_text() == "published"
    assert set(inside["mounts"]) - set(bare["mounts"]) == {"/workspace", ARTIFACTS_MOUNT}
    assert set(bare["mounts"]) <= set(inside["mounts"])
    assert inside["mknod"] == errno.EPERM  # no capability to make a device file
    assert not (mount.tree / "null").exists()


async def test_a_ro_workspace_is_really_read_only(
    sandbox: DockerSandbox, prober: ToolDefinition, tmp_path: Path
) -> None:
    mount = mount_in(tmp_path, WorkspaceMode.READ)
    inside = await probe(sandbox, prober, mount)
    assert inside["seen"] == "from the base version"
    assert inside["wrote"] == errno.EROFS
    assert sorted(p.name for p in mount.tree.iterdir()) == ["given.txt"]
    assert (mount.artifacts / "report.txt").read_text() == "published"  # always writable


# -- the coding assistant's tools: edit_file, and the shell tool run in the workspace ------

TESTS = """import unittest
from pkg.calc import add

class AddTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""


def shipped(directory: str) -> ToolDefinition:
    image_id = tool_images()[tool_tag(directory)]
    client = docker.APIClient(timeout=60)
    try:
        labels = client.inspect_image(image_id)["Config"]["Labels"]
    finally:
        client.close()
    return definition_from_labels(tool_tag(directory), image_id, labels)


async def call(
    sandbox: DockerSandbox, tool: ToolDefinition, mount: RunMount, **args: Any
) -> dict[str, Any]:
    spec = RunSpec(
        operation_id=f"c-{uuid.uuid4().hex[:12]}",
        session_id="s-c",
        tool=tool,
        args=args,
        workspace=mount,
    )
    outcome = await sandbox.run(spec)
    assert outcome.termination is Termination.EXITED, outcome
    assert isinstance(outcome.output, dict), outcome
    return {"exit": outcome.exit_code, **outcome.output}


async def test_the_coding_tools_write_a_package_run_its_tests_and_fix_it(
    sandbox: DockerSandbox, tmp_path: Path
) -> None:
    edit = shipped("edit-file")
    assert edit.workspace == WorkspaceAccess(mode=WorkspaceMode.WRITE)
    # the shell tool's command runs in its working directory: the workspace, once mounted
    run = shipped("shell").model_copy(update={"workspace": edit.workspace})
    mount = mount_in(tmp_path, WorkspaceMode.WRITE)
    for path, text in {
        "pkg/__init__.py": "",
        "pkg/calc.py": "def add(a, b):\n    return a - b\n",
        "tests/test_calc.py": TESTS,
    }.items():
        wrote = await call(sandbox, edit, mount, path=path, content=text)
        assert wrote["exit"] == 0 and wrote["created"], wrote
    unittest = "python3 -m unittest discover -s tests"
    failing = await call(sandbox, run, mount, command=unittest)
    assert failing["exit"] == 0 and failing["exit_code"] == 1
    assert "FAILED (failures=1)" in failing["stderr"]
    fixed = await call(sandbox, edit, mount, path="pkg/calc.py", old="a - b", new="a + b")
    assert fixed["exit"] == 0 and not fixed["created"]
    passing = await call(sandbox, run, mount, command=unittest + " 2>&1")
    assert passing["exit_code"] == 0 and "OK" in passing["stdout"]
    out = await call(sandbox, edit, mount, path="../escape.py", content="x")
    assert out["exit"] == 1 and "error" in out
    assert not (tmp_path / "escape.py").exists()
