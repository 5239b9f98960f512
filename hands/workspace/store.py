"""What the Hands need of the store's workspace side (``SessionStore.workspaces``).

``VersionStore`` is the interface the store provides (``session_store.workspaces``,
issue 32 part A): which file blobs it lacks, a file's blob in and out, a version's
manifest in and out. ``versions_of`` answers the store's own; a store without one (this
branch was built before it) gets ``BlobVersions``, a stand-in over the store's blob
space with the same signatures, which the store's real one replaces.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol, cast

from contracts import BlobRef, InvalidInput
from contracts.workspace import Manifest, ManifestEntry, WorkspaceVersion
from session_store import SessionStore, layout

#: blobs asked about or moved at once
_CONCURRENCY = 8


class VersionStore(Protocol):
    """The store's side of workspaces, as the Hands use it."""

    async def missing(self, digests: Iterable[str]) -> set[str]:
        """The file blobs (SHA-256 digests) the store does not hold."""
        ...

    async def put_file(self, data: bytes) -> BlobRef:
        """A file's content as a content-addressed blob."""
        ...

    async def file(self, entry: ManifestEntry) -> bytes:
        """A file's content by its manifest entry (checked against its digest)."""
        ...

    async def put_version(
        self, manifest: Manifest, *, base: WorkspaceVersion | None
    ) -> WorkspaceVersion:
        """``manifest`` as a version made from ``base``; refused unless every file blob
        it names is stored."""
        ...

    async def manifest(self, version: WorkspaceVersion) -> Manifest:
        """A version's manifest (checked against its id)."""
        ...


def versions_of(store: SessionStore) -> VersionStore:
    """The store's workspace side, or the stand-in over its blobs."""
    found = getattr(store, "workspaces", None)
    return cast(VersionStore, found) if found is not None else BlobVersions(store)


class BlobVersions:
    """A stand-in for ``SessionStore.workspaces``: files and manifests as blobs in the
    store's blob space (no version index, no retention)."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._limit = asyncio.Semaphore(_CONCURRENCY)

    async def missing(self, digests: Iterable[str]) -> set[str]:
        return await self._lacking(digests)

    async def _lacking(self, digests: Iterable[str]) -> set[str]:
        wanted = sorted(set(digests))
        held = await asyncio.gather(*(self._held(digest) for digest in wanted))
        return {digest for digest, there in zip(wanted, held, strict=True) if not there}

    async def _held(self, digest: str) -> bool:
        async with self._limit:
            return bool(await self._store.backend.keys(layout.blob_partition(digest)))

    async def put_file(self, data: bytes) -> BlobRef:
        async with self._limit:
            return await self._store.put_blob(data)

    async def file(self, entry: ManifestEntry) -> bytes:
        if entry.digest is None:
            raise InvalidInput(f"{entry.path} is a {entry.kind.value}, not a file")
        async with self._limit:
            return await self._store.get_blob(self._ref(entry.digest, entry.size))

    async def put_version(
        self, manifest: Manifest, *, base: WorkspaceVersion | None
    ) -> WorkspaceVersion:
        files = {entry.digest for entry in manifest.entries if entry.digest is not None}
        lacking = await self._lacking(files)
        if lacking:
            raise InvalidInput(
                f"the manifest names {len(lacking)} file blob(s) the store does not hold "
                f"(e.g. {min(lacking)}): a version is never partial"
            )
        blob = await self._store.put_blob(manifest.canonical(), "application/json")
        return WorkspaceVersion(
            id=blob.digest,
            manifest=blob,
            base=base.id if base is not None else None,
            files=manifest.files,
            size=manifest.size,
        )

    async def manifest(self, version: WorkspaceVersion) -> Manifest:
        data = await self._store.get_blob(version.manifest)
        manifest = Manifest.model_validate_json(data)
        if manifest.version_id() != version.id:
            raise InvalidInput(f"the manifest of version {version.id} is not that version's")
        return manifest

    def _ref(self, digest: str, size: int) -> BlobRef:
        chunk = self._store.blobs.ref_of(b"").chunk_bytes
        return BlobRef(digest=digest, size=size, chunk_bytes=chunk)
