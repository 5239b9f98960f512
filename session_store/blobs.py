"""Content-addressed, immutable blobs, chunked to fit the backend's item size."""

from __future__ import annotations

import asyncio
import hashlib

from contracts import BlobRef, CorruptRecord, NotFound, PayloadTooLarge, ReadOnlyStore
from session_store import layout
from session_store.backend import Backend, ItemExists


class BlobStore:
    """Put bytes, get a ``BlobRef``; the same bytes always give the same reference."""

    def __init__(
        self, backend: Backend, *, max_blob_bytes: int, chunk_bytes: int, read_only: bool
    ) -> None:
        self._backend = backend
        self._chunk_bytes = min(chunk_bytes, backend.max_item_bytes)
        self._max_blob_bytes = max_blob_bytes
        self._read_only = read_only

    def ref_of(self, data: bytes, media_type: str = "application/octet-stream") -> BlobRef:
        """The reference ``put`` would return for ``data``, without writing anything."""
        return BlobRef(
            digest=hashlib.sha256(data).hexdigest(),
            size=len(data),
            media_type=media_type,
            chunk_bytes=self._chunk_bytes,
        )

    async def put(self, data: bytes, media_type: str = "application/octet-stream") -> BlobRef:
        if self._read_only:
            raise ReadOnlyStore("this store was opened read-only; blobs cannot be written")
        if len(data) > self._max_blob_bytes:
            raise PayloadTooLarge(
                f"blob is {len(data):,} bytes; the limit is {self._max_blob_bytes:,} bytes "
                "(max_blob_bytes)",
                size=len(data),
                limit=self._max_blob_bytes,
            )
        step = self._chunk_bytes
        chunks = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
        ref = self.ref_of(data, media_type)
        await asyncio.gather(*(self._create_chunk(ref, n, chunk) for n, chunk in enumerate(chunks)))
        return ref

    async def get(self, ref: BlobRef) -> bytes:
        partition = layout.blob_partition(ref.digest)
        pieces = await asyncio.gather(
            *(
                self._backend.get(partition, layout.chunk_item(ref.chunk_bytes, n))
                for n in range(ref.chunks)
            )
        )
        if all(piece is None for piece in pieces):
            raise NotFound(f"blob {ref.digest} is not in the store", digest=ref.digest)
        data = b"".join(piece or b"" for piece in pieces)
        if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.digest:
            raise CorruptRecord(
                f"blob {ref.digest} is incomplete or damaged ({len(data):,} of "
                f"{ref.size:,} bytes, digest mismatch)",
                digest=ref.digest,
            )
        return data

    async def delete(self, ref: BlobRef) -> None:
        """Remove a blob that no record refers to any more (the caller knows it): its
        ref item first, so a crash never leaves one claiming chunks that are gone."""
        partition = layout.blob_partition(ref.digest)
        await self._backend.delete(partition, layout.BLOB_REF_ITEM)
        await asyncio.gather(
            *(
                self._backend.delete(partition, layout.chunk_item(ref.chunk_bytes, n))
                for n in range(ref.chunks)
            )
        )

    async def _create_chunk(self, ref: BlobRef, index: int, chunk: bytes) -> None:
        partition = layout.blob_partition(ref.digest)
        item = layout.chunk_item(ref.chunk_bytes, index)
        try:
            await self._backend.create(partition, item, chunk)
        except ItemExists:
            # Same address, same bytes, unless the piece there is torn (a writer that died
            # mid-upload on a server that kept a short body): then this put repairs it.
            if await self._backend.get(partition, item) != chunk:
                await self._backend.put(partition, item, chunk)
