"""STAND-IN for part A's ``SessionStore.workspaces`` (issue 32): a version's manifest and
a file's contents read from the store's blobs. The integrator takes part A's module."""

from __future__ import annotations

from contracts import BlobRef, CorruptRecord
from contracts.workspace import Manifest, ManifestEntry, WorkspaceVersion
from session_store.blobs import BlobStore


class WorkspaceStore:
    """Reads versions: ``manifest(version)`` and ``file(entry)``."""

    def __init__(self, blobs: BlobStore) -> None:
        self._blobs = blobs

    async def manifest(self, version: WorkspaceVersion) -> Manifest:
        data = await self._blobs.get(version.manifest)
        manifest = Manifest.model_validate_json(data)
        if manifest.version_id() != version.id:
            raise CorruptRecord(f"the manifest of version {version.id} does not match its id")
        return manifest

    async def file(self, entry: ManifestEntry) -> bytes:
        if entry.digest is None:
            raise CorruptRecord(f"{entry.path} is a {entry.kind.value}, not a file")
        chunk_bytes = self._blobs.ref_of(b"").chunk_bytes
        ref = BlobRef(digest=entry.digest, size=entry.size, chunk_bytes=chunk_bytes)
        return await self._blobs.get(ref)
