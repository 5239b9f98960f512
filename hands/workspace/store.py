"""What the Hands need of the store's workspace side (``SessionStore.workspaces``).

``VersionStore`` is the interface the store provides (``session_store.workspaces``):
which file blobs it lacks, a file's blob in and out, a version's manifest in and out.
The Hands depend on no more than this (tests wrap it to count what is asked).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from contracts import BlobRef
from contracts.workspace import Manifest, ManifestEntry, WorkspaceVersion
from session_store import SessionStore

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
    """The store's workspace side."""
    return store.workspaces
