"""Workspace versions in the store: file contents and manifests as blobs (``docs/workspaces.md``).

A Hands asks which file blobs the store lacks (``missing``), uploads only those
(``put_file``) and records the tree as a version (``put_version``); any Hands reads a
version back (``manifest``, ``file``). Every file blob is content-addressed in the
store's blob space (``session_store.blobs``); once all of its chunks are written, a small
**ref item** beside them (``layout.BLOB_REF_ITEM``: the ``BlobRef``, chunk size
included) says the blob is whole. ``missing`` reads only those ref items — never the
content — and a reader finds a file's chunks from its manifest entry's digest alone.

A version is never partial: ``put_version`` refuses a manifest whose files are not all
in the store, and writes the manifest (``Manifest.canonical()``) as a blob whose digest
is the version's id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, TypeVar

from pydantic import ValidationError

from contracts import (
    BlobRef,
    ConflictError,
    CorruptRecord,
    InvalidInput,
    NotFound,
    ReadOnlyStore,
)
from contracts.workspace import (
    PERMISSION_BITS,
    EntryKind,
    Manifest,
    ManifestEntry,
    WorkspaceVersion,
    normal_path,
)
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.blobs import BlobStore
from session_store.collection import Collected, Collector, Touches

#: requests to the backend one workspace call keeps in flight at once
CONCURRENCY: Final = 32
#: the media type of a manifest's blob
MANIFEST_MEDIA_TYPE: Final = "application/vnd.brainhands.workspace-manifest+json"
#: digests a refusal names at most
_NAMED: Final = 5

T = TypeVar("T")
R = TypeVar("R")


class WorkspaceStore:
    """Files and versions of workspaces on one store (``SessionStore.workspaces``)."""

    def __init__(
        self, backend: Backend, blobs: BlobStore, touches: Touches, *, read_only: bool
    ) -> None:
        self._backend = backend
        self._read_only = read_only
        self._blobs = blobs
        self._touches = touches
        #: set by the ``SessionStore`` that owns this (it knows every session's retention)
        self.collector: Collector | None = None

    async def collect(self, session_id: str) -> Collected:
        """Delete the session's versions and blobs that nothing retains
        (``session_store.collection``): safe beside writers and after a killed run."""
        self._writable()
        if self.collector is None:
            raise InvalidInput("this workspace store has no collector")
        return await self.collector.collect(session_id)

    async def collect_orphans(self) -> Collected:
        """Delete every workspace blob, of any session, that nothing retains and no
        writer touched within the grace period (``Collector.collect_orphans``)."""
        self._writable()
        if self.collector is None:
            raise InvalidInput("this workspace store has no collector")
        return await self.collector.collect_orphans()

    async def missing(self, digests: Iterable[str]) -> set[str]:
        """The file blobs (by SHA-256) the store does not hold whole yet, or that a
        collection is deleting: a Hands uploads only those. Reads one small ref item per
        digest and one listing of condemned blobs, never a file."""
        wanted = sorted(set(digests))
        for digest in wanted:
            _check_digest(digest)
        refs = await _bounded(self._ref, wanted)
        absent = {digest for digest, ref in zip(wanted, refs, strict=True) if ref is None}
        # being collected: one listing (a collection's marks are few, and usually none)
        condemned = set(await self._backend.keys(layout.CONDEMNED_PARTITION))
        return absent | (condemned & set(wanted))

    async def put_file(self, data: bytes) -> BlobRef:
        """A file's content as a content-addressed blob, then its ref item (so the blob
        counts as present only once every chunk is there). ``ConflictError`` while a
        collector is deleting the same content: retry once it is done."""
        return await self._put_whole(data, "application/octet-stream")

    async def file(self, entry: ManifestEntry) -> bytes:
        """A file's bytes by its manifest entry: ``NotFound`` when its blob is not in the
        store, ``CorruptRecord`` when it is damaged or not the size the entry says."""
        if entry.kind is not EntryKind.FILE or entry.digest is None:
            raise InvalidInput(f"{entry.path} is a {entry.kind.value}, not a file")
        ref = await self._ref(entry.digest)
        if ref is None:
            raise NotFound(
                f"file {entry.path}: its blob {entry.digest} is not in the store",
                digest=entry.digest,
            )
        if ref.size != entry.size:
            raise CorruptRecord(
                f"file {entry.path}: its blob holds {ref.size:,} bytes, the manifest says "
                f"{entry.size:,}",
                digest=entry.digest,
            )
        return await self._blobs.get(ref)  # checks every byte against the digest

    async def put_version(
        self, manifest: Manifest, *, base: WorkspaceVersion | None
    ) -> WorkspaceVersion:
        """Record ``manifest`` as a version made from ``base`` (None: the empty
        workspace). ``InvalidInput`` for a manifest a workspace may not hold or whose
        files are not all in the store with the sizes it says."""
        self._writable()
        manifest = checked_manifest(manifest)
        inherited = set() if base is None else await self._inherited(base)
        # the base's files are safe while its call is open (its mount retains it); the
        # others are touched before they are checked (``session_store.collection``)
        await self._check_files(manifest, inherited)
        ref = await self._put_whole(manifest.canonical(), MANIFEST_MEDIA_TYPE)
        return WorkspaceVersion(
            id=ref.digest,
            manifest=ref,
            base=base.id if base is not None else None,
            files=manifest.files,
            size=manifest.size,
        )

    async def manifest(self, version: WorkspaceVersion) -> Manifest:
        """The version's manifest, read and checked: ``NotFound`` when its blob is not in
        the store, ``CorruptRecord`` when it is damaged or is not the version's."""
        if version.manifest.digest != version.id:
            raise InvalidInput(
                f"version {version.id} names manifest blob {version.manifest.digest}; "
                "a version's id is its manifest's digest"
            )
        data = await self._blobs.get(version.manifest)  # checks the digest
        try:
            manifest = checked_manifest(Manifest.model_validate_json(data))
        except (ValidationError, InvalidInput) as error:
            raise CorruptRecord(
                f"manifest of version {version.id} is not a valid manifest: {_first(error)}",
                version=version.id,
            ) from None
        if manifest.canonical() != data:
            raise CorruptRecord(
                f"manifest of version {version.id} is not in canonical form",
                version=version.id,
            )
        return manifest

    async def has_version(self, version: WorkspaceVersion) -> bool:
        """Whether the version's manifest blob is whole in the store (a commit's check:
        one small read, not the manifest)."""
        if version.manifest.digest != version.id:
            return False
        return await self._ref(version.id) is not None

    async def _inherited(self, base: WorkspaceVersion) -> set[str]:
        """The file digests of ``base``, read fast: its blob is checked against its
        digest, and it was checked in full when it was recorded."""
        if base.manifest.digest != base.id:
            raise InvalidInput(f"base version {base.id} is not its manifest's digest")
        try:
            document = json.loads(await self._blobs.get(base.manifest))
            return {e["digest"] for e in document["entries"] if e.get("digest") is not None}
        except (ValueError, TypeError, KeyError, AttributeError):
            raise CorruptRecord(f"manifest of base version {base.id} is unreadable") from None

    def _writable(self) -> None:
        if self._read_only:  # before any touch: a read-only store writes nothing at all
            raise ReadOnlyStore("this store was opened read-only; workspaces cannot change")

    async def _put_whole(self, data: bytes, media_type: str) -> BlobRef:
        self._writable()
        ref = self._blobs.ref_of(data, media_type)
        await self._touches.touch(ref.digest)
        if await self._touches.condemned(ref.digest):
            raise ConflictError(
                f"blob {ref.digest} is being collected; put it again once that is done",
                digest=ref.digest,
            )
        await self._blobs.put(data, media_type)
        # ItemExists: another writer finished the same content first; its chunks are whole
        with contextlib.suppress(ItemExists):
            await self._backend.create(
                layout.blob_partition(ref.digest), layout.BLOB_REF_ITEM, _ref_bytes(ref)
            )
        return ref

    async def _relied_on(self, digest: str) -> BlobRef | None:
        """Touch, then look: the blob's ref unless it is missing or condemned."""
        await self._touches.touch(digest)
        if await self._touches.condemned(digest):
            return None
        return await self._ref(digest)

    async def _ref(self, digest: str) -> BlobRef | None:
        data = await self._backend.get(layout.blob_partition(digest), layout.BLOB_REF_ITEM)
        if data is None:
            return None
        try:
            ref = BlobRef.model_validate_json(data)
        except ValidationError:
            return None  # a damaged ref item: the blob counts as missing and is put again
        return ref if ref.digest == digest else None

    async def _check_files(self, manifest: Manifest, inherited: set[str]) -> None:
        files = [
            entry
            for entry in manifest.entries
            if entry.digest is not None and entry.digest not in inherited
        ]
        refs = await _bounded(self._relied_on, [entry.digest or "" for entry in files])
        absent = [entry for entry, ref in zip(files, refs, strict=True) if ref is None]
        if absent:
            raise InvalidInput(
                f"{len(absent):,} file(s) of the manifest are not in the store (first: "
                f"{', '.join(entry.path for entry in absent[:_NAMED])}); upload them "
                "(put_file) before recording the version",
                missing=[entry.digest for entry in absent[:_NAMED]],
            )
        for entry, ref in zip(files, refs, strict=True):
            if ref is not None and ref.size != entry.size:
                raise InvalidInput(
                    f"file {entry.path}: the manifest says {entry.size:,} bytes, its blob "
                    f"holds {ref.size:,}",
                    path=entry.path,
                )


def checked_manifest(manifest: Manifest) -> Manifest:
    """``manifest`` checked again, whoever built it (it may have been built without
    validation), for what a tree cannot be: a path that is absolute, leaves the root, is
    not in normal form or comes twice or out of order; a path under a file or a link
    (restoring it would write through the link); a file without a digest, a digest or a
    target on what may not have one. ``InvalidInput``. Checked in one pass, without
    pydantic (a 10,000-file manifest in milliseconds)."""
    kinds: dict[str, EntryKind] = {}
    previous = ""
    for entry in manifest.entries:
        path = _checked_entry(entry)
        if path <= previous:
            raise InvalidInput(f"a manifest's paths are unique and in order: {path[:80]!r}")
        previous = path
        kinds[path] = EntryKind(entry.kind)
        parent, _, _ = path.rpartition("/")
        while parent:
            if kinds.get(parent, EntryKind.DIR) is not EntryKind.DIR:
                raise InvalidInput(
                    f"workspace path {path[:80]!r} is under {parent[:80]!r}, which is a "
                    f"{kinds[parent].value}, not a directory"
                )
            parent, _, _ = parent.rpartition("/")
    if all(type(entry.kind) is EntryKind for entry in manifest.entries):
        return manifest
    try:  # built from raw values: rebuild it typed (its checks passed above)
        return Manifest.model_validate(manifest.model_dump(warnings=False))
    except ValidationError as error:
        raise InvalidInput(f"not a valid workspace manifest: {_first(error)}") from None


def _checked_entry(entry: ManifestEntry) -> str:
    """The entry's path, once the entry is one a manifest may hold."""
    path = entry.path
    if not isinstance(path, str):
        raise InvalidInput("a workspace path is a string")
    try:
        kind = EntryKind(entry.kind)
        if not _is_normal(path):
            normal_path(path)  # the specific complaint (absolute, leaves the root, …)
            raise InvalidInput(f"workspace path {path[:80]!r} is not in normal form")
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    if (kind is EntryKind.FILE) != (entry.digest is not None):
        raise InvalidInput(f"{path[:80]}: a file, and only a file, has a digest")
    if entry.digest is not None:
        _check_digest(str(entry.digest))
    if (kind is EntryKind.LINK) != (entry.target is not None):
        raise InvalidInput(f"{path[:80]}: a link, and only a link, has a target")
    if not isinstance(entry.mode, int) or not 0 <= entry.mode <= PERMISSION_BITS:
        raise InvalidInput(f"{path[:80]}: mode {entry.mode!r} is not permission bits")
    if not isinstance(entry.size, int) or entry.size < 0:
        raise InvalidInput(f"{path[:80]}: size {entry.size!r} is not a byte count")
    return path


def _is_normal(path: str) -> bool:
    """``normal_path(path) == path``, ten times faster: relative, 1-4096 characters, no
    NUL, no empty, ``.`` or ``..`` segment."""
    if not 0 < len(path) <= 4096 or "\x00" in path:
        return False
    return all(segment not in _NOT_SEGMENTS for segment in path.split("/"))


_NOT_SEGMENTS: Final = frozenset({"", ".", ".."})


def _check_digest(digest: str) -> None:
    if len(digest) != 64 or digest.strip("0123456789abcdef"):
        raise InvalidInput(f"{digest[:80]!r} is not a SHA-256 digest (64 hex digits)")


def _ref_bytes(ref: BlobRef) -> bytes:
    return json.dumps(ref.model_dump(mode="json"), sort_keys=True).encode()


def _first(error: ValidationError | InvalidInput) -> str:
    if isinstance(error, InvalidInput):
        return error.message
    return str(error.errors()[0]["msg"])


async def _bounded(call: Callable[[T], Awaitable[R]], items: list[T]) -> list[R]:
    """``call`` on every item, ``CONCURRENCY`` at a time, results in order."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(item: T) -> R:
        async with gate:
            return await call(item)

    return list(await asyncio.gather(*(one(item) for item in items)))
