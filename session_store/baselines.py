"""Baselines: the materialised state at a seq, plus archived entry segments.

A baseline is a small create-once record pointing at a state blob. Writing one also
moves the entries accumulated since the previous baseline into an immutable segment
blob, so neither the baseline nor the load grows with the length of the conversation.
"""

from __future__ import annotations

import contextlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from contracts import BaselineRecord, BlobRef, Entry, EntrySegment
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.blobs import BlobStore
from session_store.codec import decode, encode
from session_store.state import SessionState


class SegmentBody(BaseModel):
    """The JSON body of an entry segment blob."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    type: Literal["entries"] = "entries"
    entries: tuple[Entry, ...]


class SegmentIndex(BaseModel):
    """The JSON body of an entry index blob: every archived segment, oldest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    type: Literal["entry_index"] = "entry_index"
    segments: tuple[EntrySegment, ...]


class Baselines:
    def __init__(self, backend: Backend, blobs: BlobStore, *, kept: int) -> None:
        self._backend = backend
        self._blobs = blobs
        self._kept = kept

    async def write(self, snapshot: SessionState) -> None:
        """Persist ``snapshot`` (a private copy) as the baseline at its seq.

        Archives the snapshot's entry tail first and updates the snapshot to point at
        the archive, so the caller can drop those entries from live memory too.
        """
        await self._archive_entries(snapshot)
        state_ref = await self._blobs.put(encode(snapshot), "application/json")
        record = BaselineRecord(session_id=snapshot.session_id, seq=snapshot.seq, state=state_ref)
        partition = layout.baseline_partition(snapshot.session_id)
        # Another writer may have baselined the same seq: the same state by construction.
        with contextlib.suppress(ItemExists):
            await self._backend.create(partition, layout.seq_item(snapshot.seq), encode(record))
        await self._prune(partition)

    async def latest(self, session_id: str) -> SessionState | None:
        partition = layout.baseline_partition(session_id)
        found = await self._backend.last(partition)
        if found is None:
            return None
        item, data = found
        record = decode(data, BaselineRecord, where=f"{partition}/{item}")
        blob = await self._blobs.get(record.state)
        return decode(blob, SessionState, where=f"blob {record.state.digest}")

    async def segment(self, segment: EntrySegment) -> tuple[Entry, ...]:
        data = await self._blobs.get(segment.blob)
        return decode(data, SegmentBody, where=f"blob {segment.blob.digest}").entries

    async def segments(self, index: BlobRef | None) -> tuple[EntrySegment, ...]:
        if index is None:
            return ()
        data = await self._blobs.get(index)
        return decode(data, SegmentIndex, where=f"blob {index.digest}").segments

    async def _archive_entries(self, snapshot: SessionState) -> None:
        if not snapshot.entries_tail:
            return
        body = SegmentBody(entries=tuple(snapshot.entries_tail))
        ref = await self._blobs.put(encode(body), "application/json")
        segment = EntrySegment(
            blob=ref, first=snapshot.entries_archived, count=len(snapshot.entries_tail)
        )
        index = SegmentIndex(segments=(*await self.segments(snapshot.entry_index), segment))
        snapshot.entry_index = await self._blobs.put(encode(index), "application/json")
        snapshot.entries_archived = snapshot.entry_count
        snapshot.entries_tail = []

    async def _prune(self, partition: str) -> None:
        # Older baselines are never needed for correctness; keep a few for readers
        # that listed them a moment ago.
        items = await self._backend.keys(partition)
        for item in items[: -self._kept]:
            await self._backend.delete(partition, item)
