"""Uploads of a session's derived blobs (baseline states, entry segments), journaled so
that a writer dying between uploading a blob and creating the record that refers to it
leaves nothing behind for good.

Before such a blob is uploaded, an ``Upload`` item names it with the baseline seq it is
for; once the referring record exists, the item is removed. Items left by writers that
died are swept when a newer baseline exists: a blob no retained baseline or segment
record refers to is deleted, then the item. A writer still uploading for an older seq
than the newest baseline may find its blob gone; that costs it nothing but a baseline
that loaders skip, because baselines are never needed for correctness. Blobs that
commits refer to (tool outputs, operation results) are not journaled here and never
swept: nothing here can delete a blob a retained record or an in-flight commit can
reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import Field

from contracts import BlobRef, RecordError
from contracts.model import Frozen
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.blobs import BlobStore
from session_store.codec import decode, encode


class Upload(Frozen):
    v: Literal[1] = 1
    type: Literal["upload"] = "upload"
    seq: int = Field(ge=0)
    blob: BlobRef


class Uploads:
    def __init__(self, backend: Backend, blobs: BlobStore) -> None:
        self._backend = backend
        self._blobs = blobs

    async def put(self, session_id: str, seq: int, data: bytes) -> BlobRef:
        """Journal, then upload, a derived blob of ``session_id`` for the baseline at ``seq``."""
        ref = self._blobs.ref_of(data, "application/json")
        with contextlib.suppress(ItemExists):  # a retry of the same upload
            await self._backend.create(
                layout.uploads_partition(session_id), ref.digest, encode(Upload(seq=seq, blob=ref))
            )
        return await self._blobs.put(data, "application/json")

    async def done(self, session_id: str, ref: BlobRef) -> None:
        """The record referring to ``ref`` exists: the blob is reachable."""
        await self._backend.delete(layout.uploads_partition(session_id), ref.digest)

    async def sweep(
        self,
        session_id: str,
        *,
        below: int,
        referenced: Callable[[], Awaitable[set[str]]],
    ) -> int:
        """Delete blobs journaled for baselines older than ``below`` that no retained
        record refers to (``referenced`` lists the digests they do; it is called only
        when there is something to sweep); returns how many blobs were collected."""
        partition = layout.uploads_partition(session_id)
        stale: list[tuple[str, Upload | None]] = []
        for item, data in await self._backend.items(partition):
            try:
                upload: Upload | None = decode(data, Upload, where=f"{partition}/{item}")
            except RecordError:
                upload = None  # unreadable: nothing to follow, drop the item
            if upload is None or upload.seq < below:
                stale.append((item, upload))
        if not stale:
            return 0
        keep = await referenced()
        collected = 0
        for item, upload in stale:
            if upload is not None and upload.blob.digest not in keep:
                await self._blobs.delete(upload.blob)
                collected += 1
            await self._backend.delete(partition, item)
        return collected
