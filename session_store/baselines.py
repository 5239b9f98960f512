"""Baselines: the materialised state at a seq, plus archived entry segments.

A baseline is a small create-once record pointing at a state blob. Writing one also
moves the entries accumulated since the previous baseline into an immutable segment
blob, so neither the baseline nor the load grows with the length of the conversation.
"""

from __future__ import annotations

import contextlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from contracts import BaselineRecord, Entry, EntrySegment
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


class Baselines:
    def __init__(self, backend: Backend, blobs: BlobStore, *, kept: int) -> None:
        self._backend = backend
        self._blobs = blobs
        self._kept = kept

    async def write(self, snapshot: SessionState) -> EntrySegment | None:
        """Persist ``snapshot`` (a private copy) as the baseline at its seq.

        Returns the entry segment it archived, if any, so that the live state may drop
        those entries from memory too.
        """
        segment = await self._archive_entries(snapshot)
        state_ref = await self._blobs.put(encode(snapshot), "application/json")
        record = BaselineRecord(session_id=snapshot.session_id, seq=snapshot.seq, state=state_ref)
        partition = layout.baseline_partition(snapshot.session_id)
        # Another writer may have baselined the same seq: the same state by construction.
        with contextlib.suppress(ItemExists):
            await self._backend.create(partition, layout.seq_item(snapshot.seq), encode(record))
        await self._prune(partition)
        return segment

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

    async def _archive_entries(self, snapshot: SessionState) -> EntrySegment | None:
        if not snapshot.entries_tail:
            return None
        body = SegmentBody(entries=tuple(snapshot.entries_tail))
        ref = await self._blobs.put(encode(body), "application/json")
        segment = EntrySegment(
            blob=ref,
            first=snapshot.entry_count - len(snapshot.entries_tail),
            count=len(snapshot.entries_tail),
        )
        snapshot.entry_segments.append(segment)
        snapshot.entries_tail = []
        return segment

    async def _prune(self, partition: str) -> None:
        # Older baselines are never needed for correctness; keep a few for readers
        # that listed them a moment ago.
        items = await self._backend.keys(partition)
        for item in items[: -self._kept]:
            await self._backend.delete(partition, item)
