"""The Brain's side of workspaces (issue 32): a call's mount is frozen in its intent, one
``rw`` call at a time (the next waits durably), ``ro`` calls alongside, and the commit
that applies a result moves the head to the version it produced."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from brain.context import PhaseContext
from brain.operations import operation_id
from brain.outcome import Done, Effects
from brain.registry import Registry
from brain.tools import ToolSpec
from contracts import InvalidInput, Operation, OperationResult, OperationStatus, TaskStatus
from contracts.tool import ToolDefinition
from contracts.workspace import (
    EntryKind,
    Manifest,
    ManifestEntry,
    WorkspaceAccess,
    WorkspaceLimits,
    WorkspaceMode,
    WorkspaceVersion,
)
from session_store import SessionStore
from tests.support.kernel import Kernel, kernel, kind


def tool(name: str, mode: WorkspaceMode) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        version=1,
        timeout_s=20,
        command=(sys.executable, "-c", "print('{}')"),
        image=f"test/{name}",
        image_id=f"sha256:{name}",
        workspace=WorkspaceAccess(mode=mode, path="/work"),
    )


def registry() -> Registry:
    async def start(ctx: PhaseContext) -> Done:
        done = await ctx.operation(ctx.input["tool"], {"n": ctx.input["n"]}, "k")
        return Done(result=done.output, effects=Effects(applied_operations=(done.operation_id,)))

    found = Registry()
    found.add(kind("call", {"start": start}))
    return found


async def version(
    store: SessionStore, text: str, base: WorkspaceVersion | None
) -> WorkspaceVersion:
    """A version holding one file, ``notes.txt``, with ``text``."""
    data = text.encode()
    await store.workspaces.put_file(data)
    manifest = Manifest(
        entries=(
            ManifestEntry(
                path="notes.txt",
                kind=EntryKind.FILE,
                digest=hashlib.sha256(data).hexdigest(),
                size=len(data),
            ),
        )
    )
    return await store.workspaces.put_version(manifest, base=base)


async def answer(
    store: SessionStore, session: str, op: str, produced: WorkspaceVersion | None
) -> None:
    """What a Hands does: the operation's record (from its intent) and its result, with
    its version."""
    dispatch = (await store.intent(session, op)).dispatch  # type: ignore[union-attr]
    record = await store.create_operation(
        Operation(
            operation_id=op,
            session_id=session,
            task_id=dispatch.task_id,
            tool=dispatch.tool,
            tool_version=dispatch.tool_version,
            args=dispatch.args,
            status=OperationStatus.RUNNING,
        )
    )
    await store.put_operation_result(
        OperationResult(
            operation_id=op, session_id=session, succeeded=True, output={}, version=produced
        )
    )
    await store.transition_operation(record, OperationStatus.SUCCEEDED)


@pytest.fixture
async def k(tmp_path: Path) -> Kernel:
    async with kernel(tmp_path, registry()) as made:
        for name, mode in (("edit", WorkspaceMode.WRITE), ("read", WorkspaceMode.READ)):
            made.tools.add_sandboxed(tool(name, mode))
        yield made


def op_of(session: str, request: str) -> str:
    return operation_id(session, f"root.{request}", "k")


async def test_a_writes_mount_is_frozen_in_its_intent_and_its_result_moves_the_head(
    k: Kernel,
) -> None:
    await k.submit_task("call", {"tool": "edit", "n": 1})
    await k.run()
    state = (await k.store.session("s1")).state
    mount = state.intents[op_of("s1", "r1")].dispatch.workspace
    assert mount is not None and mount.mode is WorkspaceMode.WRITE and mount.path == "/work"
    assert mount.base is None and mount.limits == WorkspaceLimits()
    produced = await version(k.store, "one", None)
    await answer(k.store, "s1", op_of("s1", "r1"), produced)
    await k.run()
    state = (await k.store.session("s1")).state
    assert state.workspace == produced
    assert state.tasks["root.r1"].status is TaskStatus.TERMINAL


async def test_one_writer_at_a_time_the_next_waits_and_starts_from_the_new_head(
    k: Kernel,
) -> None:
    await k.submit_task("call", {"tool": "edit", "n": 1}, request_id="r1")
    await k.run()
    await k.submit_task("call", {"tool": "edit", "n": 2}, request_id="r2")
    await k.submit_task("call", {"tool": "read", "n": 3}, request_id="r3")
    await k.run()
    state = (await k.store.session("s1")).state
    first, second, reader = op_of("s1", "r1"), op_of("s1", "r2"), op_of("s1", "r3")
    waiting = state.tasks["root.r2"]
    assert second not in state.intents, "the second writer did not dispatch"
    assert waiting.wait is not None and waiting.wait.operations == (first,)
    assert reader in state.intents, "a reader runs alongside"
    produced = await version(k.store, "one", None)
    await answer(k.store, "s1", first, produced)
    await k.run()
    state = (await k.store.session("s1")).state
    mount = state.intents[second].dispatch.workspace
    assert mount is not None and mount.base == produced, "made from the new head"


def test_an_in_process_tool_cannot_mount_the_workspace(k: Kernel) -> None:
    async def run(args: object, operation_id: str) -> object:
        return None

    spec = ToolSpec(name="local", workspace=WorkspaceAccess(mode=WorkspaceMode.READ))
    with pytest.raises(InvalidInput, match="only a tool run on the Hands"):
        k.tools.register(spec, run)
