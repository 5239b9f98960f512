"""SIGKILL the workspace collector and a writer at every store write, alone and side by
side, and check (``docs/workspaces.md``, "Retention"): no retained version loses a blob,
a committed version is whole, and a collection run to its end leaves nothing
unreferenced of what it collected.
"""

from __future__ import annotations

import hashlib
import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest

from contracts import CONTROL_DOCUMENT, Commit, CorruptRecord, DocumentPatch, NotFound
from contracts.workspace import EntryKind, WorkspaceVersion
from session_store import SessionStore, layout
from session_store.codec import encode
from session_store.collection import Touch
from tests.support.processes import python_module
from tests.support.stores import StoreLocation, new_location
from tests.support.workspace_worker import FENCE, tree

pytestmark = [pytest.mark.chaos, pytest.mark.store, pytest.mark.slow]

#: SQLite in the test command (about a minute); S3 on moto too with BH_CHAOS_FULL=1
#: (about four more: a process per store write)
KINDS = [pytest.param("sqlite", marks=pytest.mark.sqlite)] + (
    [pytest.param("s3", marks=pytest.mark.s3)] if os.environ.get("BH_CHAOS_FULL") else []
)
#: more store writes than a clean collection or write of the scenario makes
STEPS = 60


WORKER = "tests.support.workspace_worker"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def scenario(place: StoreLocation) -> list[WorkspaceVersion]:
    """Session s1 keeps 1 version of 3 (each its own ``a.py`` and a common file)."""
    store = await place.open()
    handle = await store.session("s1")
    await handle.commit(
        Commit(documents=(_retention(1),)),
        fence=None,
    )
    made: list[WorkspaceVersion] = []
    for n in range(3):
        files = {"a.py": f"s1 {n}\n".encode(), "common.txt": b"common\n"}
        for data in files.values():
            await store.workspaces.put_file(data)
        version = await store.workspaces.put_version(tree(files), base=made[-1] if made else None)
        await handle.commit(Commit(workspace=version), fence=FENCE)
        made.append(version)
    await age_touches(store)
    return made


async def age_touches(store: SessionStore) -> None:
    """Every touch so far as if made two hours ago (past the grace period of an hour):
    the scenario's blobs are old, and only the processes' own touches are young."""
    past = await store.clock.fresh() - timedelta(hours=2)
    for shard in "0123456789abcdef":
        partition = f"workspace/touched/{shard}"
        for item, data in await store.backend.items(partition):
            touch = Touch.model_validate_json(data)
            await store.backend.put(partition, item, encode(touch.model_copy(update={"at": past})))


def _retention(versions: int) -> DocumentPatch:
    return DocumentPatch(
        name=CONTROL_DOCUMENT, patch={"retention": {"keep_versions": versions}}, create=True
    )


async def intact(store: SessionStore, version: WorkspaceVersion) -> bool:
    try:
        manifest = await store.workspaces.manifest(version)
        for entry in manifest.entries:
            if entry.kind is EntryKind.FILE:
                await store.workspaces.file(entry)
    except (NotFound, CorruptRecord):
        return False
    return True


def run(mode: str, url: str, session_id: str, crash_at: int | None) -> bool:
    """Run the worker; whether it was killed (else it finished)."""
    env = {"BH_CRASH_AT": str(crash_at)} if crash_at else {}
    with python_module(WORKER, mode, url, session_id, env=env) as child:
        _, errors = child.communicate(timeout=120)
    if child.returncode == -signal.SIGKILL:
        return True
    assert child.returncode == 0, errors
    return False


async def retained_whole(store: SessionStore) -> None:
    """Every committed version a session retains reads back whole: here, each head (s1
    keeps one version; s2, the writer's session, has one). An index entry whose commit
    never landed (a writer killed between them) counts for retention but holds nothing
    anyone relies on, so it is not checked."""
    for session_id in ("s1", "s2"):
        head = (await store.session(session_id)).state.workspace
        assert head is None or await intact(store, head), f"{session_id} lost {head}"


async def collected_all(store: SessionStore, made: list[WorkspaceVersion]) -> None:
    await store.workspaces.collect("s1")
    await retained_whole(store)
    assert not await store.backend.keys(layout.CONDEMNED_PARTITION)
    for version in made[:2]:
        assert not await store.backend.keys(layout.blob_partition(version.id))
    writer = (await store.session("s2")).state.workspace
    if writer is None:  # nobody retains the first a.py
        assert not await store.backend.keys(layout.blob_partition(digest(b"s1 0\n")))


@pytest.mark.parametrize("mode", ["collect", "write"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_process_killed_at_any_write_loses_no_retained_blob(
    kind: str, mode: str, tmp_path: Path
) -> None:
    for step in range(1, STEPS + 1):
        place, prepare = new_location(kind, tmp_path / f"{step}")
        (tmp_path / f"{step}").mkdir()
        await prepare()
        made = await scenario(place)
        killed = run(mode, place.url, "s1" if mode == "collect" else "s2", step)
        store = await place.open(workspace_grace_seconds=0)
        await retained_whole(store)
        # a collection then finishes what a killed one began (a condemned blob is no
        # writer's until then), and the writer runs (again) to its end
        run("collect", place.url, "s1", None)
        await retained_whole(store)
        run("write", place.url, "s2", None)
        await retained_whole(store)
        await collected_all(store, made)
        written = (await store.session("s2")).state.workspace
        assert written is not None and await intact(store, written)
        await place.close_all()
        if not killed:
            return
    raise AssertionError(f"the {mode} process made more than {STEPS} writes")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_writer_beside_a_collector_killed_at_any_write_keeps_its_version(
    kind: str, tmp_path: Path
) -> None:
    for step in range(1, STEPS + 1):
        (tmp_path / f"{step}").mkdir()
        place, prepare = new_location(kind, tmp_path / f"{step}")
        await prepare()
        made = await scenario(place)
        env = {"BH_CRASH_AT": str(step)}
        with (
            python_module(
                "tests.support.workspace_worker", "collect", place.url, "s1", env=env
            ) as collector,
            python_module(WORKER, "write", place.url, "s2") as writer,
        ):
            _, writer_errors = writer.communicate(timeout=120)
            collector.communicate(timeout=120)
        store = await place.open(workspace_grace_seconds=0)
        await retained_whole(store)
        committed = (await store.session("s2")).state.workspace
        if committed is not None:  # committed beside the collector: whole
            assert await intact(store, committed)
        else:  # it waited on a blob the killed collector had condemned, in vain
            assert collector.returncode == -signal.SIGKILL, writer_errors
            run("collect", place.url, "s1", None)
            run("write", place.url, "s2", None)
        written = (await store.session("s2")).state.workspace
        assert written is not None and await intact(store, written)
        await collected_all(store, made)
        await place.close_all()
        if collector.returncode == 0:
            return
    raise AssertionError(f"the collector made more than {STEPS} writes")
