"""Workspaces in the Session Store (issue 32, ``docs/workspaces.md``), on every backend:
file blobs (which are missing, put, read back), versions (manifests as blobs whose
digest is the id), and hostile manifests refused.
"""

from __future__ import annotations

import hashlib

import pytest

from contracts import CorruptRecord, InvalidInput, NotFound
from contracts.workspace import EntryKind, Manifest, ManifestEntry, WorkspaceVersion
from session_store import layout
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
