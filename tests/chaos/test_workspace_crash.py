"""SIGKILL a real Hands process at every boundary of a workspace call, and check the
workspace (issue 32): one version per applied call, no partial version, every applied
call's files present, nothing uploaded twice.

A task makes three ``rw`` calls of one tool in turn, each applied before the next is
made (one writer at a time: ``tests/support/workspace_coder.py``). Call ``n`` writes
three files ``n/a``, ``n/b``, ``n/c`` of known content into the workspace. The Hands that
runs the second call is killed at a boundary — before its upload, after the first blob
uploaded, after the version is stored, after the run is collected, after the result is
written — and a second Hands, with a cache of its own (another host), takes over. Then
the Brain, a ``python -m brain run`` process of its own, is killed after the second
call's dispatch (its result is written while no Brain runs: after the result, before the
apply) and after the commit that applies it, and a second Brain finishes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from brain.embedded import run_until_idle
from brain.registry import Registry
from brain.results import ResultWaiter
from brain.runner import SessionRunner
from brain.tools import LocalDispatcher
from bus import Bus, BusSettings
from contracts import Outcome, ReplayPolicy
from contracts.tool import ToolDefinition
from contracts.workspace import EntryKind, WorkspaceAccess, WorkspaceMode
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.support.processes import ROOT
from tests.support.toolpath import brain_services, bus_settings, hands_process, runs, scratch_bus
from tests.support.toolpath import stop as stop_process
from tests.support.workspace_coder import CALLS, coder

pytestmark = [pytest.mark.chaos, pytest.mark.nats, pytest.mark.sqlite, pytest.mark.slow]

#: the call whose Hands is killed (the second: it starts from the first one's version)
KILLED = 2
FILES = ("a", "b", "c")

# Writes call n's three files into the workspace and records the run in the ledger.
EDIT = """
import json, os
n = json.loads(os.environ["BH_ARGUMENTS"])["n"]
root = os.environ["BH_WORKSPACE"]
os.makedirs(os.path.join(root, str(n)), exist_ok=True)
for name in "abc":
    with open(os.path.join(root, str(n), name), "w") as file:
        file.write(f"call {n}, file {name}\\n" * (200 + n))
with open(os.environ["LEDGER"], "a") as ledger:
    ledger.write(os.environ["BH_OPERATION_ID"] + "\\n")
print(json.dumps({"wrote": n}))
"""


def content(n: int, name: str) -> bytes:
    return (f"call {n}, file {name}\n" * (200 + n)).encode()


FILES_OF = {
    n: {hashlib.sha256(content(n, name)).hexdigest() for name in FILES} for n in range(1, CALLS + 1)
}


def edit_tool(ledger: Path) -> ToolDefinition:
    return ToolDefinition(
        name="edit",
        version=1,
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        replay=ReplayPolicy.SAFE,
        # a killed Hands' attempt is over (and taken over) this long after it started
        timeout_s=8,
        command=(sys.executable, "-c", EDIT),
        config={"LEDGER": str(ledger)},
        image="test/edit",
        image_id="sha256:edit",
        workspace=WorkspaceAccess(mode=WorkspaceMode.WRITE),
    )


@dataclass
class Scene:
    tmp: Path
    store_url: str
    store: SessionStore
    bus: Bus
    settings: BusSettings
    runner: SessionRunner
    ledger: Path

    def hands(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        return hands_process(
            self.store_url,
            self.settings,
            self.tmp / f"host-{name}",
            name=name,
            env={"BH_HANDS_WORKSPACE_CACHE": str(self.tmp / f"cache-{name}"), **env},
            log=self.tmp / f"{name}.log",
        )

    async def brain(self, **env: str) -> int:
        """``python -m brain run`` on s1 with ``edit`` on the Hands, to its end."""
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "brain", "run", "--store", self.store_url),
            *("--session", "s1", "--plugin", "tests.support.workspace_coder:plugin"),
            *("--sandboxed", "edit"),
            cwd=ROOT,
            env={
                **os.environ,
                "BH_NATS_URL": self.settings.url,
                "BH_NAMESPACE": self.settings.namespace,
                **env,
            },
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), timeout=120)
        code = process.returncode
        assert code in (0, -signal.SIGKILL), err.decode()[-2000:]
        return code

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")


@pytest.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = await open_store(store_url)
    ledger = tmp_path / "ledger"
    definition = await store.tools.register(edit_tool(ledger))
    tools = LocalDispatcher()
    tools.add_sandboxed(definition)
    registry = Registry()
    registry.add(coder())
    settings = bus_settings()
    async with scratch_bus(settings) as bus:
        runner = SessionRunner(store, registry, brain_services(store, tools, bus))
        yield Scene(tmp_path, store_url, store, bus, settings, runner, ledger)
    await store.close()


@pytest.mark.parametrize(
    "point",
    [
        # the first call's snapshot is that Hands' first: the second call's its second
        f"hands:workspace:before_upload#{KILLED}",
        # mid-upload: the first of the second call's three blobs is stored (the first
        # call uploaded three before it)
        f"hands:workspace:uploaded#{len(FILES) + 1}",
        f"hands:workspace:version_put#{KILLED}",
        f"hands:collected#{KILLED}",
        f"hands:result_written#{KILLED}",
    ],
)
async def test_a_hands_killed_at_a_workspace_boundary_loses_and_repeats_nothing(
    scene: Scene, point: str
) -> None:
    first = scene.hands("hands-a", BH_CRASH_AT=point)
    await SessionClient(scene.store).submit("s1", "r1", {"task": {"kind": "coder", "input": {}}})
    async with ResultWaiter(scene.bus, "s1") as results:
        driving = asyncio.create_task(run_until_idle(scene.runner, "s1", results=results))
        try:
            assert await asyncio.to_thread(first.wait, 60) == -signal.SIGKILL
            stored = FILES_OF[KILLED] - await scene.store.workspaces.missing(FILES_OF[KILLED])
            second = scene.hands("hands-b")
            try:
                await asyncio.wait_for(driving, 90)
            finally:
                stop_process(second)
        finally:
            driving.cancel()
    await _check(scene, point, stored)


async def _check(scene: Scene, point: str, stored_before_takeover: set[str]) -> None:
    handle = await scene.store.session("s1")
    task = handle.state.tasks.get("root.r1") or await handle.task("root.r1")
    assert task is not None and task.outcome is Outcome.SUCCEEDED, task
    # one version per applied call, each made from the one before it
    applied: Counter[str] = Counter()
    versions = []
    async for record in scene.store.history("s1"):
        applied.update(record.commit.applied_operations)
        if record.commit.workspace is not None:
            versions.append(record.commit.workspace)
    assert len(applied) == CALLS and set(applied.values()) == {1}, applied
    assert len(versions) == CALLS, versions
    assert [v.base for v in versions] == [None, versions[0].id, versions[1].id]
    # no partial version: every version's every file is whole in the store
    for number, version in enumerate(versions, start=1):
        manifest = await scene.store.workspaces.manifest(version)
        files = {e.path: e for e in manifest.entries if e.kind is EntryKind.FILE}
        assert sorted(files) == [f"{n}/{name}" for n in range(1, number + 1) for name in FILES]
        for path, entry in files.items():
            n, name = path.split("/")
            assert await scene.store.workspaces.file(entry) == content(int(n), name)
    # the head is the last version: every applied call's files present
    assert handle.state.workspace == versions[-1]
    # the killed call ran again only where its first run left no result to collect
    assert sorted(Counter(runs(scene.ledger)).values())[-1] <= 2
    # nothing uploaded twice: where the second Hands made the killed call's version, it
    # uploaded only the blobs the store lacked when it took over
    killed = list(applied)[KILLED - 1]
    told = re.findall(
        rf"operation {killed}: version \w+ from \w+: (\d+) new blob\(s\), (\d+) uploaded",
        scene.log("hands-b") if (scene.tmp / "hands-b.log").exists() else "",
    )
    reran = point.startswith("hands:workspace") or point.startswith("hands:collected")
    assert bool(told) == reran, told  # else the first Hands' result stands
    for new, uploaded in told:
        assert int(new) == len(FILES), told
        assert int(uploaded) == len(FILES_OF[KILLED] - stored_before_takeover), told


@pytest.mark.parametrize(
    "point",
    [
        # the second call dispatched: its result is written while no Brain runs, and
        # applied by the next Brain (after the result, before the apply)
        "relay:published:tools.dispatch.edit#2",
        # the second call's result applied and the third call's intent committed, its
        # dispatch not yet published (after the apply)
        "relay:before_publish:tools.dispatch.edit#3",
    ],
)
async def test_a_brain_killed_around_a_workspace_apply_applies_each_version_once(
    scene: Scene, point: str
) -> None:
    hands = scene.hands("hands-a")
    try:
        await SessionClient(scene.store).submit(
            "s1", "r1", {"task": {"kind": "coder", "input": {}}}
        )
        assert await scene.brain(BH_CRASH_AT=point) == -signal.SIGKILL
        second = (await scene.store.session("s1")).state
        assert second.tasks["root.r1"].outcome is None  # not finished by the first Brain
        assert await scene.brain() == 0
    finally:
        stop_process(hands)
    await _check(scene, point, set())
