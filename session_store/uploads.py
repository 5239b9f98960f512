"""Uploads of baseline state blobs, journaled so that a writer dying between uploading
the blob and creating the baseline record that refers to it leaves nothing for good.

Before a state blob is uploaded, an ``Upload`` item naming it and the baseline seq it is
for is created in the session's baseline partition (``-upload.<digest>``, which sorts
before every baseline, so listing the partition to prune finds both); once the record
exists, the item is removed. Items left by writers that died are swept when a newer
baseline exists: the blob is deleted unless a retained record refers to it, then the
item. A writer still uploading for an older seq than the newest baseline may find its
blob gone; that costs it nothing but a baseline that loaders skip, because baselines are
never needed for correctness. Blobs that commits or operation results refer to (tool
outputs) are never journaled or swept: nothing here can delete a blob a retained record
or an in-flight commit can reach.
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


def is_upload(item: str) -> bool:
    return item.startswith(layout.UPLOAD_PREFIX)


class Uploads:
    def __init__(self, backend: Backend, blobs: BlobStore) -> None:
        self._backend = backend
        self._blobs = blobs

    async def put(self, session_id: str, seq: int, data: bytes) -> BlobRef:
        """Journal, then upload, a state blob of ``session_id`` for the baseline at ``seq``."""
        ref = self._blobs.ref_of(data, "application/json")
        with contextlib.suppress(ItemExists):  # a retry of the same upload
            await self._backend.create(
                layout.baseline_partition(session_id),
                layout.upload_item(ref.digest),
                encode(Upload(seq=seq, blob=ref)),
            )
        return await self._blobs.put(data, "application/json")

    async def done(self, session_id: str, ref: BlobRef) -> None:
        """The record referring to ``ref`` exists: the blob is reachable."""
        await self._backend.delete(
            layout.baseline_partition(session_id), layout.upload_item(ref.digest)
        )

    async def sweep(
        self,
        session_id: str,
        items: list[str],
        *,
        below: int,
        referenced: Callable[[], Awaitable[set[str]]],
    ) -> int:
        """Given the journal ``items`` a listing found, delete blobs journaled for
        baselines older than ``below`` that no retained record refers to
        (``referenced`` is called only when there is something to sweep); returns how
        many blobs were collected."""
        partition = layout.baseline_partition(session_id)
        stale: list[tuple[str, Upload | None]] = []
        for item in items:
            data = await self._backend.get(partition, item)
            if data is None:
                continue
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
