"""Reading a workspace (issue 32, part D): the head as of a commit, the versions a
session applied, a diff between two versions, and the tree as a tar stream — on the
embedded SQLite store, with versions built directly (``tests.support.workspaces``)."""

from __future__ import annotations

import gc
import io
import re
import tarfile
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts import Commit, NotFound
from contracts.workspace import Artifact, EntryKind, Manifest, ManifestEntry
from session_api import workspace_diff
from session_api.artifacts import session_artifacts
from session_api.workspace_diff import diff, text_of
from session_api.workspace_tar import tar_stream
from session_api.workspace_tree import applied_versions, head_at, tree_at, workspace_path
from session_api.workspace_views import NAME_PATTERN, Change
from session_store import SessionStore, open_store
from tests.support.workspaces import Dir, File, Link, apply_version, put_version, record_result


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        yield opened
    finally:
        await opened.close()


TREE = {
    "pkg": Dir(),
    "pkg/__init__.py": b"",
    "pkg/calc.py": b"def add(a, b):\n    return a - b\n",
    "run.sh": File(b"#!/bin/sh\npytest\n", mode=0o755),
    "latest": Link("pkg/calc.py"),
    "outside": Link("../../etc/passwd"),
    "logo.png": b"\x89PNG\r\n\x1a\n\0\0\0",
}


async def test_the_head_as_of_each_commit_is_the_version_applied_by_then(
    store: SessionStore,
) -> None:
    await store.put_blob(b"unrelated")
    first, one = await apply_version(store, "s1", TREE, operation_id="op-1")
    fixed = {**TREE, "pkg/calc.py": b"def add(a, b):\n    return a + b\n"}
    second, two = await apply_version(store, "s1", fixed, operation_id="op-2")
    assert (one, two) == (1, 2) and second.base == first.id

    assert (await head_at(store, "s1", 1)).version == first
    latest = await tree_at(store, "s1", None)
    assert latest.version == second and latest.head.seq == 2
    calc = latest.find("pkg/calc.py")
    assert calc is not None and await store.workspaces.file(calc) == fixed["pkg/calc.py"]
    assert [entry.path for entry in latest.children(None)] == [
        "latest",
        "logo.png",
        "outside",
        "pkg",
        "run.sh",
    ]
    with pytest.raises(NotFound, match="has 2 commits, not 3"):
        await tree_at(store, "s1", 3)
    with pytest.raises(NotFound, match="has no commits"):
        await tree_at(store, "nobody", None)


async def test_a_session_without_a_write_has_no_workspace(store: SessionStore) -> None:
    await record_result(store, "s1", "op-ro", artifacts={"report.txt": b"ok"})
    handle = await store.session("s1")
    await handle.commit(Commit(applied_operations=("op-ro",)), fence=1)
    with pytest.raises(NotFound, match="no workspace as of commit 1"):
        await tree_at(store, "s1", None)
    assert await applied_versions(store, "s1") == []


async def test_an_implied_directory_is_a_directory_and_paths_are_checked(
    store: SessionStore,
) -> None:
    await apply_version(store, "s1", {"a/b/c.txt": b"c"}, operation_id="op-1")
    tree = await tree_at(store, "s1", None)
    implied = tree.find("a/b")
    assert implied is not None and implied.kind is EntryKind.DIR
    assert [entry.path for entry in tree.children("a/b")] == ["a/b/c.txt"]
    assert tree.find("a/b/d") is None
    assert workspace_path("a/./b//c.txt") == "a/b/c.txt"
    for bad in ("../etc/passwd", "/etc/passwd", "a/../../b", ".", "a\0b"):
        with pytest.raises(Exception, match="workspace path") as refused:
            workspace_path(bad)
        assert refused.value.details == {"field": "path", "location": "path"}  # type: ignore[attr-defined]


async def test_the_versions_list_names_each_commit_and_the_operation_behind_it(
    store: SessionStore,
) -> None:
    first, _ = await apply_version(store, "s1", {"a.txt": b"1"}, operation_id="op-1")
    handle = await store.session("s1")
    await handle.commit(Commit(), fence=1)  # an empty commit moves nothing
    second, _ = await apply_version(store, "s1", {"a.txt": b"22"}, operation_id="op-2")
    versions = await applied_versions(store, "s1")
    assert [(v.seq, v.operation_id, v.version.id) for v in versions] == [
        (1, "op-1", first.id),
        (3, "op-2", second.id),
    ]
    assert versions[1].version.base == first.id and versions[1].version.size == 2

    await store.fork("s1", at=2, into="f1")  # a fork starts from the head as of its commit
    forked = await applied_versions(store, "f1")
    assert [(v.seq, v.operation_id, v.inherited_from) for v in forked] == [(1, None, "s1@2")]
    assert forked[0].version.id == first.id
    assert (await tree_at(store, "f1", None)).version == first


async def test_a_diff_lists_each_change_with_a_unified_diff_for_text(
    store: SessionStore,
) -> None:
    before = {
        "calc.py": b"def add(a, b):\n    return a - b\n",
        "gone.txt": b"bye\n",
        "run.sh": File(b"pytest\n", mode=0o644),
        "latest": Link("calc.py"),
        "blob.bin": b"\0\1\2",
        "same.txt": b"same\n",
        "tail.txt": b"no newline",
    }
    after = {
        "calc.py": b"def add(a, b):\n    return a + b\n",
        "new.txt": b"hello\n",
        "run.sh": File(b"pytest\n", mode=0o755),
        "latest": Link("new.txt"),
        "blob.bin": b"\0\1\3",
        "same.txt": b"same\n",
        "tail.txt": b"no newline, still",
    }
    old = await _manifest(store, before)
    new = await _manifest(store, after)
    changes = {change.path: change for change in await diff(store.workspaces.file, old, new)}
    assert list(changes) == sorted(changes) and "same.txt" not in changes
    assert changes["gone.txt"].change is Change.REMOVED
    assert changes["new.txt"].change is Change.ADDED
    assert changes["new.txt"].diff == "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"
    calc = changes["calc.py"]
    assert calc.change is Change.CHANGED and calc.diff is not None
    assert "-    return a - b\n+    return a + b\n" in calc.diff
    assert calc.diff.startswith("--- a/calc.py\n+++ b/calc.py\n")
    assert changes["run.sh"].note == "mode 0644 → 0755" and changes["run.sh"].diff is None
    assert changes["latest"].note == "link target 'calc.py' → 'new.txt'"
    assert changes["blob.bin"].note == "binary: not diffed"
    assert "\\ No newline at end of file\n" in (changes["tail.txt"].diff or "")


async def test_a_diff_reads_only_bounded_text(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_diff, "TEXT_DIFF_BYTES", 8)
    monkeypatch.setattr(workspace_diff, "TEXT_DIFFS", 2)
    old = await _manifest(store, {})
    new = await _manifest(store, {"a": b"1", "big": b"x" * 9, "c": b"3"})
    read: list[str] = []

    async def counted(entry: ManifestEntry) -> bytes:
        read.append(entry.path)
        return await store.workspaces.file(entry)

    changes = {change.path: change for change in await diff(counted, old, new)}
    assert changes["big"].note == "not diffed: over 0 KiB"
    assert changes["a"].diff and changes["c"].diff is None
    assert changes["c"].note == "not diffed: only the first 2 changed files are"
    assert sorted(read) == ["a"]
    assert text_of(b"caf\xc3\xa9") == "café" and text_of(b"\xff") is None


async def test_the_tar_stream_keeps_links_as_links_and_modes(store: SessionStore) -> None:
    version = await put_version(store, TREE)
    manifest = await store.workspaces.manifest(version)
    data = b"".join(
        [chunk async for chunk in tar_stream(store.workspaces.file, manifest, mtime=1e9)]
    )
    assert len(data) % tarfile.RECORDSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert sorted(members) == sorted(TREE)
        assert members["pkg"].isdir() and members["pkg"].mode == 0o755
        assert members["run.sh"].mode == 0o755 and members["pkg/calc.py"].mode == 0o644
        assert members["latest"].issym() and members["latest"].linkname == "pkg/calc.py"
        assert members["outside"].issym() and members["outside"].linkname == "../../etc/passwd"
        assert all(member.mtime == 1_000_000_000 for member in members.values())
        extracted = archive.extractfile("logo.png")
        assert extracted is not None and extracted.read() == TREE["logo.png"]
    long_name = "d/" + "x" * 200
    deep = await _manifest(store, {long_name: b"deep"})
    data = b"".join([c async for c in tar_stream(store.workspaces.file, deep, mtime=0)])
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        assert archive.getnames() == [long_name]


async def test_the_tar_stream_holds_a_window_of_the_tree_not_all_of_it(
    store: SessionStore,
) -> None:
    """Streamed: 32 files of 256 KiB (8 MiB) go through holding at most the window of
    file contents (1 MiB) plus what one member in flight takes; a stream that kept the
    tree, or read it all ahead, would hold 8 MiB."""
    size, count = 256 * 1024, 32
    tree = {f"f{n:02}": bytes([n]) * size for n in range(count)}
    manifest = await _manifest(store, tree)
    del tree
    gc.collect()
    tracemalloc.start()
    try:
        sent = 0
        stream = tar_stream(store.workspaces.file, manifest, mtime=0, window_bytes=1024 * 1024)
        async for chunk in stream:
            sent += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sent > count * size
    assert peak < 3 * 1024 * 1024, f"peak {peak:,} bytes"


async def test_artifacts_are_listed_per_operation_and_their_names_are_the_contract_s(
    store: SessionStore,
) -> None:
    await record_result(store, "s1", "op-1", artifacts={"report.txt": b"ok", "patch.diff": b"+"})
    await record_result(store, "s1", "op-2")
    await record_result(store, "s2", "op-3", artifacts={"other.txt": b"no"})
    listed = await session_artifacts(store, "s1")
    assert [(a.operation_id, a.name, a.size, a.media_type) for a in listed] == [
        ("op-1", "report.txt", 2, "text/plain"),
        ("op-1", "patch.diff", 1, "application/octet-stream"),
    ]
    blob = listed[0]
    for name, allowed in (
        ("report.txt", True),
        ("a/b", False),
        (".hidden", False),
        ("x" * 129, False),
    ):
        assert bool(re.fullmatch(NAME_PATTERN, name)) is allowed, name
        try:
            Artifact(name=name, blob=(await store.put_blob(b"x")), media_type="x")
        except ValueError:
            assert not allowed, name
        else:
            assert allowed, name
    assert blob.digest


async def _manifest(store: SessionStore, tree: dict[str, bytes | File | Link | Dir]) -> Manifest:
    return await store.workspaces.manifest(await put_version(store, tree))
