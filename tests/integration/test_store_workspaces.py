"""Workspaces in the Session Store (issue 32, ``docs/workspaces.md``), on every backend:
file blobs (which are missing, put, read back), versions (manifests as blobs whose
digest is the id), and hostile manifests refused.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from contracts import (
    CONTROL_DOCUMENT,
    Commit,
    ConflictError,
    CorruptRecord,
    DocumentPatch,
    Intent,
    InvalidInput,
    NotFound,
    Operation,
    OperationResult,
    ReadOnlyStore,
)
from contracts.tool import Dispatch
from contracts.workspace import (
    EntryKind,
    Manifest,
    ManifestEntry,
    WorkspaceMode,
    WorkspaceMount,
    WorkspaceVersion,
)
from session_store import SessionStore, layout
from session_store.codec import encode
from session_store.collection import Touch
from tests.support.builders import small_commit
from tests.support.stores import SUITE_BACKENDS, StoreLocation, location_fixture

pytestmark = pytest.mark.store

location = location_fixture(SUITE_BACKENDS)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_entry(path: str, data: bytes, mode: int = 0o644) -> ManifestEntry:
    return ManifestEntry(
        path=path, kind=EntryKind.FILE, mode=mode, digest=digest(data), size=len(data)
    )


def tree(files: dict[str, bytes]) -> Manifest:
    """A manifest of ``files`` and the directories above them."""
    entries: dict[str, ManifestEntry] = {}
    for path, data in files.items():
        parent, _, _ = path.rpartition("/")
        while parent:
            entries[parent] = ManifestEntry(path=parent, kind=EntryKind.DIR, mode=0o755)
            parent, _, _ = parent.rpartition("/")
        entries[path] = file_entry(path, data)
    return Manifest(entries=tuple(entries[path] for path in sorted(entries)))


async def put_tree(location: StoreLocation, files: dict[str, bytes]) -> WorkspaceVersion:
    store = await location.open()
    for data in files.values():
        await store.workspaces.put_file(data)
    return await store.workspaces.put_version(tree(files), base=None)


# --- file blobs ----------------------------------------------------------------------


async def test_missing_names_only_the_files_the_store_lacks(location: StoreLocation) -> None:
    store = await location.open()
    held, absent = b"print('hello')\n", b"not uploaded"
    ref = await store.workspaces.put_file(held)
    assert ref.digest == digest(held) and ref.size == len(held)
    assert await store.workspaces.missing([digest(held), digest(absent)]) == {digest(absent)}
    assert await store.workspaces.missing([]) == set()


async def test_a_blob_whose_upload_did_not_finish_counts_as_missing(
    location: StoreLocation,
) -> None:
    store = await location.open(blob_chunk_bytes=1024)
    data = bytes(range(256)) * 12  # three chunks
    await store.workspaces.put_file(data)
    partition = layout.blob_partition(digest(data))
    # a writer that died after its chunks, before the ref item that says they are whole
    await store.backend.delete(partition, layout.BLOB_REF_ITEM)
    assert await store.workspaces.missing([digest(data)]) == {digest(data)}
    await store.workspaces.put_file(data)  # the Hands uploads it again
    assert await store.workspaces.missing([digest(data)]) == set()


async def test_a_file_reads_back_by_its_manifest_entry_on_any_client(
    location: StoreLocation,
) -> None:
    writer = await location.open(blob_chunk_bytes=1024)
    data = bytes(range(256)) * 20
    await writer.workspaces.put_file(data)
    reader = await location.open()  # another chunk size: the entry's digest is enough
    assert await reader.workspaces.file(file_entry("src/big.bin", data)) == data


async def test_a_missing_or_damaged_file_is_an_error_never_wrong_bytes(
    location: StoreLocation,
) -> None:
    store = await location.open()
    with pytest.raises(NotFound, match="not in the store"):
        await store.workspaces.file(file_entry("a.txt", b"never uploaded"))
    ref = await store.workspaces.put_file(b"original")
    await store.backend.put(
        layout.blob_partition(ref.digest), layout.chunk_item(ref.chunk_bytes, 0), b"tampered"
    )
    with pytest.raises(CorruptRecord):
        await store.workspaces.file(file_entry("a.txt", b"original"))
    with pytest.raises(InvalidInput, match="not a file"):
        await store.workspaces.file(ManifestEntry(path="d", kind=EntryKind.DIR))


async def test_missing_refuses_what_is_not_a_digest(location: StoreLocation) -> None:
    store = await location.open()
    with pytest.raises(InvalidInput, match="SHA-256"):
        await store.workspaces.missing(["../../etc/passwd"])


# --- versions ------------------------------------------------------------------------


async def test_a_version_is_its_manifests_digest_and_reads_back(location: StoreLocation) -> None:
    files = {"pkg/__init__.py": b"", "pkg/core.py": b"x = 1\n", "README": b"hi\n"}
    version = await put_tree(location, files)
    manifest = tree(files)
    assert version.id == manifest.version_id() == version.manifest.digest
    assert (version.base, version.files, version.size) == (None, 3, 9)
    reader = await location.open()
    assert await reader.workspaces.manifest(version) == manifest
    assert await reader.workspaces.has_version(version)
    for entry in manifest.entries:
        if entry.kind is EntryKind.FILE:
            assert await reader.workspaces.file(entry) == files[entry.path]
    following = await reader.workspaces.put_version(manifest, base=version)
    assert following.id == version.id and following.base == version.id  # same tree, same id


async def test_a_version_whose_files_are_not_all_in_the_store_is_refused(
    location: StoreLocation,
) -> None:
    store = await location.open()
    await store.workspaces.put_file(b"uploaded")
    manifest = tree({"a": b"uploaded", "b": b"never uploaded"})
    with pytest.raises(InvalidInput, match="not in the store") as refused:
        await store.workspaces.put_version(manifest, base=None)
    assert refused.value.details["missing"] == [digest(b"never uploaded")]
    assert await store.workspaces.missing([manifest.version_id()]) == {manifest.version_id()}


async def test_a_manifest_that_lies_about_a_files_size_is_refused(location: StoreLocation) -> None:
    store = await location.open()
    await store.workspaces.put_file(b"four")
    lying = ManifestEntry(path="a", kind=EntryKind.FILE, digest=digest(b"four"), size=3)
    with pytest.raises(InvalidInput, match="3 bytes"):
        await store.workspaces.put_version(Manifest(entries=(lying,)), base=None)


async def test_a_damaged_or_foreign_manifest_is_reported(location: StoreLocation) -> None:
    version = await put_tree(location, {"a": b"1"})
    store = await location.open()
    with pytest.raises(InvalidInput, match="manifest's digest"):
        await store.workspaces.manifest(version.model_copy(update={"id": "0" * 64}))
    not_manifest = await store.put_blob(b'{"v":1,"type":"something else"}')
    foreign = WorkspaceVersion(id=not_manifest.digest, manifest=not_manifest)
    with pytest.raises(CorruptRecord, match="not a valid manifest"):
        await store.workspaces.manifest(foreign)
    gone = WorkspaceVersion(id=digest(b"gone"), manifest=store.blobs.ref_of(b"gone"))
    with pytest.raises(NotFound):
        await store.workspaces.manifest(gone)
    assert not await store.workspaces.has_version(gone)


@pytest.mark.parametrize(
    ("entries", "complaint"),
    [
        pytest.param(
            [{"path": "../outside", "kind": "file", "digest": "0" * 64}],
            "leaves the workspace's root",
            id="path-leaving-the-root",
        ),
        pytest.param(
            [{"path": "/etc/passwd", "kind": "file", "digest": "0" * 64}],
            "must be relative",
            id="absolute-path",
        ),
        pytest.param(
            [{"path": "a", "kind": "dir"}, {"path": "a", "kind": "dir"}],
            "unique",
            id="duplicate-paths",
        ),
        pytest.param([{"path": "a", "kind": "file"}], "has a digest", id="file-without-digest"),
        pytest.param(
            [{"path": "a/../b", "kind": "dir"}], "not in normal form", id="path-not-normal"
        ),
        pytest.param(
            [
                {"path": "l", "kind": "link", "mode": 0, "target": "/etc"},
                {"path": "l/passwd", "kind": "file", "digest": "0" * 64},
            ],
            "which is a link",
            id="path-under-a-link",
        ),
    ],
)
async def test_a_hostile_manifest_is_refused_and_nothing_is_written(
    location: StoreLocation, entries: list[dict[str, object]], complaint: str
) -> None:
    store = await location.open()
    hostile = Manifest.model_construct(
        entries=tuple(ManifestEntry.model_construct(**entry) for entry in entries)
    )
    with pytest.raises(InvalidInput, match=complaint):
        await store.workspaces.put_version(hostile, base=None)


# --- the head --------------------------------------------------------------------------

F = 1  # the lease holder's fence


async def version_of(
    store: SessionStore, files: dict[str, bytes], base: WorkspaceVersion | None
) -> WorkspaceVersion:
    for data in files.values():
        await store.workspaces.put_file(data)
    return await store.workspaces.put_version(tree(files), base=base)


async def test_a_commit_moves_the_head_and_a_reload_keeps_it(location: StoreLocation) -> None:
    store = await location.open()
    handle = await store.session("s1")
    assert handle.state.workspace is None  # the empty workspace
    first = await version_of(store, {"a.py": b"1"}, None)
    await handle.commit(Commit(workspace=first), fence=F)
    second = await version_of(store, {"a.py": b"2"}, first)
    await handle.commit(Commit(workspace=second), fence=F)
    assert handle.state.workspace == second
    assert (await (await location.open()).session("s1")).state.workspace == second


async def test_a_version_not_made_from_the_head_is_refused(location: StoreLocation) -> None:
    store = await location.open()
    handle = await store.session("s1")
    first = await version_of(store, {"a.py": b"1"}, None)
    await handle.commit(Commit(workspace=first), fence=F)
    stale = await version_of(store, {"b.py": b"2"}, None)  # made from the empty workspace
    with pytest.raises(ConflictError, match="base"):
        await handle.commit(Commit(workspace=stale), fence=F)
    assert (handle.seq, handle.state.workspace) == (1, first)
    reloaded = await (await location.open()).session("s1")
    assert (reloaded.seq, reloaded.state.workspace) == (1, first)


async def test_a_version_whose_manifest_is_not_in_the_store_is_refused(
    location: StoreLocation,
) -> None:
    store = await location.open()
    handle = await store.session("s1")
    manifest = tree({"a.py": b"1"})
    never_written = WorkspaceVersion(
        id=manifest.version_id(), manifest=store.blobs.ref_of(manifest.canonical())
    )
    with pytest.raises(InvalidInput, match="not in the store"):
        await handle.commit(Commit(workspace=never_written), fence=F)
    mismatched = never_written.model_copy(update={"id": "0" * 64})
    with pytest.raises(InvalidInput, match="digest"):
        await handle.commit(Commit(workspace=mismatched), fence=F)
    assert handle.seq == 0


async def test_only_the_lease_holder_moves_the_head(location: StoreLocation) -> None:
    store = await location.open()
    handle = await store.session("s1")
    first = await version_of(store, {"a.py": b"1"}, None)
    with pytest.raises(InvalidInput, match="workspace"):
        await handle.commit(Commit(workspace=first), fence=None)


async def heads(store: SessionStore, session_id: str, count: int) -> list[WorkspaceVersion]:
    """``count`` commits each moving the head to a new version."""
    handle = await store.session(session_id)
    made: list[WorkspaceVersion] = []
    for n in range(count):
        version = await version_of(store, {"a.py": str(n).encode()}, made[-1] if made else None)
        await handle.commit(Commit(workspace=version), fence=F)
        made.append(version)
    return made


async def test_session_at_gives_the_head_as_of_a_commit_across_baselines(
    location: StoreLocation,
) -> None:
    store = await location.open(baseline_every=2)
    made = await heads(store, "s1", 5)
    await store.flush()
    reader = await location.open(baseline_every=2)
    for seq, version in enumerate(made, start=1):
        assert (await reader.session_at("s1", seq)).state.workspace == version
    assert (await reader.session("s1")).state.workspace == made[-1]


async def test_a_fork_starts_from_the_head_at_the_fork_point(location: StoreLocation) -> None:
    store = await location.open(baseline_every=2)
    made = await heads(store, "s1", 4)
    fork = await store.fork("s1", at=2, into="s1-fork")
    assert fork.state.workspace == made[1]
    # the fork writes on from there, sharing blobs; the origin is untouched
    following = await version_of(store, {"a.py": b"fork"}, made[1])
    await fork.commit(Commit(workspace=following), fence=F)
    await store.flush()
    reader = await location.open()
    assert (await reader.session("s1-fork")).state.workspace == following
    assert (await reader.session_at("s1-fork", 1)).state.workspace == made[1]
    assert (await reader.session("s1")).state.workspace == made[-1]


# --- the versions index ------------------------------------------------------------------


async def test_the_versions_a_session_applied_are_listed_by_commit(
    location: StoreLocation,
) -> None:
    store = await location.open()
    handle = await store.session("s1")
    first = await version_of(store, {"a.py": b"1"}, None)
    await handle.commit(Commit(workspace=first, applied_operations=("op-1",)), fence=F)
    commit, _ = small_commit(0, None)
    await handle.commit(commit, fence=F)  # no version: not listed
    second = await version_of(store, {"a.py": b"2"}, first)
    await handle.commit(Commit(workspace=second), fence=F)
    listed = await (await location.open()).workspace_versions("s1")
    assert [(v.seq, v.version, v.operations) for v in listed] == [
        (1, first, ("op-1",)),
        (3, second, ()),
    ]
    assert [v.seq for v in await store.workspace_versions("s1", until=2)] == [1]


async def test_a_racing_writers_entry_is_dropped_and_the_winners_kept(
    location: StoreLocation,
) -> None:
    store = await location.open()
    winner, loser = await store.session("s1"), await (await location.open()).session("s1")
    ours = await version_of(store, {"a.py": b"ours"}, None)
    theirs = await version_of(store, {"a.py": b"theirs"}, None)
    await winner.commit(Commit(workspace=ours), fence=F)
    with pytest.raises(ConflictError):
        await loser.commit(Commit(workspace=theirs), fence=F)  # its entry was written first
    partition = layout.versions_partition("s1")
    assert len(await store.backend.keys(partition)) == 2
    assert [v.version for v in await store.workspace_versions("s1")] == [ours]
    assert len(await store.backend.keys(partition)) == 1  # the false entry is repaired away


async def test_a_forks_versions_begin_with_its_origins_up_to_the_fork_point(
    location: StoreLocation,
) -> None:
    store = await location.open()
    made = await heads(store, "s1", 3)
    fork = await store.fork("s1", at=2, into="s1-fork")
    following = await version_of(store, {"a.py": b"fork"}, made[1])
    await fork.commit(Commit(workspace=following), fence=F)
    listed = await store.workspace_versions("s1-fork")
    assert [(v.session_id, v.seq, v.version) for v in listed] == [
        ("s1", 1, made[0]),
        ("s1", 2, made[1]),
        ("s1-fork", 2, following),
    ]


# --- retention and collection ---------------------------------------------------------------

COMMON = b"shared by every version\n"


async def keep(store: SessionStore, session_id: str, versions: int) -> None:
    handle = await store.session(session_id)
    patch = DocumentPatch(
        name=CONTROL_DOCUMENT, patch={"retention": {"keep_versions": versions}}, create=True
    )
    await handle.commit(Commit(documents=(patch,)), fence=None)


async def history_of(store: SessionStore, session_id: str, count: int) -> list[WorkspaceVersion]:
    """``count`` applied versions, each with its own ``a.py`` and the common file."""
    handle = await store.session(session_id)
    made: list[WorkspaceVersion] = []
    for n in range(count):
        files = {"a.py": f"{session_id} {n}\n".encode(), "common.txt": COMMON}
        version = await version_of(store, files, made[-1] if made else None)
        await handle.commit(Commit(workspace=version), fence=F)
        made.append(version)
    return made


async def intact(store: SessionStore, version: WorkspaceVersion) -> bool:
    """Whether the version's manifest and every file read back."""
    try:
        manifest = await store.workspaces.manifest(version)
        for entry in manifest.entries:
            if entry.kind is EntryKind.FILE:
                await store.workspaces.file(entry)
    except (NotFound, CorruptRecord):
        return False
    return True


async def gone(store: SessionStore, version: WorkspaceVersion) -> bool:
    """Whether the version's manifest blob is deleted, every item of it."""
    return not await store.backend.keys(layout.blob_partition(version.id))


async def test_collection_deletes_what_no_session_retains_and_keeps_the_rest(
    location: StoreLocation,
) -> None:
    store = await location.open(workspace_grace_seconds=0)
    await keep(store, "s1", 2)
    made = await history_of(store, "s1", 5)
    other = await history_of(store, "s2", 1)  # another session's version: never touched
    collected = await store.workspaces.collect("s1")
    assert (collected.versions, collected.blobs) == (3, 6)  # 3 manifests, 3 own a.py
    reader = await location.open()
    assert [await gone(reader, v) for v in made] == [True, True, True, False, False]
    assert all([await intact(reader, v) for v in (*made[3:], *other)])
    own = digest(b"s1 0\n")
    assert await reader.workspaces.missing([own, digest(COMMON)]) == {own}
    assert not await store.backend.keys(layout.blob_partition(own))
    again = await store.workspaces.collect("s1")
    assert (again.versions, again.blobs) == (0, 0)


async def test_a_blob_another_session_retains_is_kept(location: StoreLocation) -> None:
    store = await location.open(workspace_grace_seconds=0)
    await keep(store, "s1", 1)
    made = await history_of(store, "s1", 3)
    # s2 holds s1's first a.py (the same bytes: the same blob), under another name
    shared = {"copy.py": b"s1 0\n"}
    theirs = await version_of(store, shared, None)
    await (await store.session("s2")).commit(Commit(workspace=theirs), fence=F)
    await store.workspaces.collect("s1")
    assert await intact(store, theirs) and await intact(store, made[-1])
    assert await gone(store, made[0])
    assert await store.workspaces.missing([digest(b"s1 0\n")]) == set()


async def test_a_forks_head_is_kept_after_its_origin_moves_on(location: StoreLocation) -> None:
    store = await location.open(workspace_grace_seconds=0)
    await keep(store, "s1", 1)
    made = await history_of(store, "s1", 2)
    fork = await store.fork("s1", at=2, into="s1-fork")  # seq 2: the control patch is 1
    assert fork.state.workspace == made[0]
    later = await version_of(store, {"a.py": b"later"}, made[-1])
    await (await store.session("s1")).commit(Commit(workspace=later), fence=F)
    await store.workspaces.collect("s1")
    assert await intact(store, made[0])  # the fork's head
    assert await gone(store, made[1]) and await intact(store, later)


async def test_nothing_touched_within_the_grace_period_is_collected(
    location: StoreLocation,
) -> None:
    store = await location.open()  # the default grace: an hour
    await keep(store, "s1", 1)
    made = await history_of(store, "s1", 3)
    collected = await store.workspaces.collect("s1")
    assert (collected.blobs, collected.kept_young) == (0, 4)
    assert all([await intact(store, v) for v in made])


async def test_a_writer_never_relies_on_a_condemned_blob(location: StoreLocation) -> None:
    store = await location.open()
    data = b"condemned"
    await store.workspaces.put_file(data)
    # a collector has condemned it (and may be deleting it now)
    await store.backend.put(layout.CONDEMNED_PARTITION, digest(data), b"{}")
    with pytest.raises(InvalidInput, match="not in the store"):
        await store.workspaces.put_version(tree({"a": data}), base=None)
    with pytest.raises(ConflictError, match="being collected"):
        await store.workspaces.put_file(data)


async def test_a_collection_killed_midway_is_finished_by_the_next(
    location: StoreLocation,
) -> None:
    store = await location.open(workspace_grace_seconds=0)
    await keep(store, "s1", 1)
    made = await history_of(store, "s1", 2)
    # killed after condemning the first version's a.py and deleting its ref item
    own = digest(b"s1 0\n")
    await store.backend.put(layout.CONDEMNED_PARTITION, own, b"{}")
    await store.backend.delete(layout.blob_partition(own), layout.BLOB_REF_ITEM)
    await store.workspaces.collect("s1")
    assert not await store.backend.keys(layout.blob_partition(own))
    assert not await store.backend.keys(layout.CONDEMNED_PARTITION)
    assert await gone(store, made[0]) and await intact(store, made[1])


async def test_a_collection_killed_after_its_last_touch_delete_is_finished_by_a_sweep(
    location: StoreLocation,
) -> None:
    """The periodic pass runs ``collect_orphans`` only: it must finish what a killed
    collection left condemned, even once the blob's touch is gone (killed between
    deleting the touch and the mark), or the content stays refused to writers."""
    store = await location.open(workspace_grace_seconds=0)
    await keep(store, "s1", 1)
    await history_of(store, "s1", 2)
    own = digest(b"s1 0\n")
    await store.backend.put(layout.CONDEMNED_PARTITION, own, b"{}")
    for item in await store.backend.keys(layout.blob_partition(own)):
        await store.backend.delete(layout.blob_partition(own), item)
    await store.backend.delete(layout.touched_partition(own), own)
    # and one it condemned that a retained version now names: the mark is lifted
    kept = digest(COMMON)
    await store.backend.put(layout.CONDEMNED_PARTITION, kept, b"{}")
    collected = await store.workspaces.collect_orphans()
    assert not await store.backend.keys(layout.CONDEMNED_PARTITION)
    assert collected.gone == 1, collected
    assert await store.workspaces.missing([own, kept]) == {own}
    await store.workspaces.put_file(b"s1 0\n")  # no longer refused as being collected


async def test_a_read_only_store_writes_nothing_for_a_workspace(location: StoreLocation) -> None:
    writer = await location.open()
    version = await version_of(writer, {"a.py": b"1"}, None)
    observer = await location.open(read_only=True)
    assert await intact(observer, version)
    with pytest.raises(ReadOnlyStore):
        await observer.workspaces.put_file(b"new")
    with pytest.raises(ReadOnlyStore):
        await observer.workspaces.put_version(tree({"a.py": b"1"}), base=None)
    with pytest.raises(ReadOnlyStore):
        await observer.workspaces.collect("s1")
    assert await writer.workspaces.missing([digest(b"new")]) == {digest(b"new")}
    assert not await writer.backend.keys(layout.touched_partition(digest(b"new")))


async def test_an_open_calls_base_and_unapplied_result_are_kept(location: StoreLocation) -> None:
    store = await location.open(workspace_grace_seconds=0)
    await keep(store, "s1", 1)
    made = await history_of(store, "s1", 2)
    # a call mounted the first version (committed then), and its run produced another
    mount = WorkspaceMount(mode=WorkspaceMode.WRITE, base=made[0])
    dispatch = Dispatch(
        operation_id="op-1", session_id="s1", tool="edit", tool_version=1, workspace=mount
    )
    await (await store.session("s1")).commit(Commit(intents=(Intent.of(dispatch),)), fence=F)
    produced = await version_of(store, {"a.py": b"produced by op-1"}, made[0])
    await store.create_operation(
        Operation(operation_id="op-1", session_id="s1", tool="edit", args=None)
    )
    await store.put_operation_result(
        OperationResult(operation_id="op-1", session_id="s1", succeeded=True, version=produced)
    )
    assert {v.id for v in await store.retained_versions("s1")} == {
        made[0].id,
        made[1].id,
        produced.id,
    }
    await store.workspaces.collect("s1")
    assert all([await intact(store, v) for v in (*made, produced)])


async def test_a_condemned_blob_counts_as_missing(location: StoreLocation) -> None:
    store = await location.open()
    data = b"being collected"
    await store.workspaces.put_file(data)
    await store.backend.put(layout.CONDEMNED_PARTITION, digest(data), b"{}")
    assert await store.workspaces.missing([digest(data)]) == {digest(data)}


async def age_touches(store: SessionStore) -> None:
    """Every touch so far as if made two hours ago (past the default grace period)."""
    past = await store.clock.fresh() - timedelta(hours=2)
    for shard in "0123456789abcdef":
        partition = f"workspace/touched/{shard}"
        for item, data in await store.backend.items(partition):
            aged = Touch.model_validate_json(data).model_copy(update={"at": past})
            await store.backend.put(partition, item, encode(aged))


async def test_a_blob_a_writer_found_present_is_kept_until_its_version_is_committed(
    location: StoreLocation,
) -> None:
    store = await location.open()  # the default grace period
    await keep(store, "s1", 1)
    await history_of(store, "s1", 3)
    await age_touches(store)  # the old versions' blobs are past the grace period
    writer = await location.open()
    found = digest(b"s1 0\n")  # the first version's a.py: nothing retains it any more
    assert await writer.workspaces.missing([found]) == set()  # so the Hands skips it
    version = await writer.workspaces.put_version(tree({"copy.py": b"s1 0\n"}), base=None)
    collected = await store.workspaces.collect("s1")  # before the version is committed
    assert collected.kept_young == 1 and collected.versions == 2
    await (await writer.session("s2")).commit(Commit(workspace=version), fence=F)
    assert await intact(writer, version)


async def test_a_writer_that_touches_while_the_collector_decides_keeps_its_blob(
    location: StoreLocation,
) -> None:
    store = await location.open()
    await keep(store, "s1", 1)
    await history_of(store, "s1", 2)
    await age_touches(store)
    writer = await location.open()
    found = digest(b"s1 0\n")
    versions: list[WorkspaceVersion] = []
    condemn = store.backend.put

    async def writer_between(partition: str, item: str, value: bytes) -> None:
        # the writer relies on the blob after the collector read its touch, just before
        # the collector condemns it: it sees no mark, so the collector must see its touch
        if partition == layout.CONDEMNED_PARTITION and item == found and not versions:
            tree_ = tree({"copy.py": b"s1 0\n"})
            versions.append(await writer.workspaces.put_version(tree_, base=None))
        await condemn(partition, item, value)

    store.backend.put = writer_between  # type: ignore[method-assign]
    collected = await store.workspaces.collect("s1")
    assert versions and collected.kept_touched == 1
    await (await writer.session("s2")).commit(Commit(workspace=versions[0]), fence=F)
    assert await intact(writer, versions[0])


async def test_blobs_no_version_names_are_collected_once_past_the_grace_period(
    location: StoreLocation,
) -> None:
    store = await location.open()
    await keep(store, "s1", 1)
    made = await history_of(store, "s1", 2)
    await store.workspaces.put_file(b"uploaded by a Hands killed before its version")
    await age_touches(store)
    await store.workspaces.put_file(b"uploaded just now")  # its Hands may be recording it
    collected = await store.workspaces.collect_orphans()
    assert (collected.blobs, collected.kept_young) == (3, 0)  # the orphan, v0 and its a.py
    assert await store.workspaces.missing(
        [digest(b"uploaded by a Hands killed before its version"), digest(b"uploaded just now")]
    ) == {digest(b"uploaded by a Hands killed before its version")}
    assert await gone(store, made[0]) and await intact(store, made[1])
