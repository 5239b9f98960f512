"""The commit log of a session: create-once records at seq 1, 2, 3, … — the protocol.

Appending commit n+1 is one create-once write of item n+1. Two writers that both loaded
seq n race for the same item; the store lets exactly one create it, the other gets
``ConflictError`` and must reload. Because every record carries the fence high-water
mark, and fences may only grow along the log, a writer whose fence is lower than the
one recorded at its expected seq is refused before it writes (``FencedError``).
"""

from __future__ import annotations

import os

from contracts import (
    Commit,
    CommitReceipt,
    CommitRecord,
    ConflictError,
    CorruptRecord,
    FencedError,
    ReadOnlyStore,
    utcnow,
)
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.baselines import Baselines
from session_store.codec import decode, encode
from session_store.index import ActiveIndex
from session_store.settings import StoreSettings
from session_store.state import SessionState, active_after, apply, check


class CommitLog:
    def __init__(
        self,
        backend: Backend,
        baselines: Baselines,
        index: ActiveIndex,
        settings: StoreSettings,
    ) -> None:
        self._backend = backend
        self._baselines = baselines
        self._index = index
        self._settings = settings

    async def load(self, session_id: str) -> tuple[SessionState, int]:
        """The current state and how many commits were replayed after the baseline."""
        state = await self._baselines.latest(session_id) or SessionState(session_id=session_id)
        return state, await self.catch_up(state)

    async def catch_up(self, state: SessionState) -> int:
        """Apply every commit after ``state.seq``; returns how many there were."""
        partition = layout.log_partition(state.session_id)
        records = await self._backend.items(partition, after=layout.seq_item(state.seq))
        for item, data in records:
            record = decode(data, CommitRecord, where=f"{partition}/{item}")
            if layout.seq_item(record.seq) != item:
                raise CorruptRecord(
                    f"record at {partition}/{item} claims seq {record.seq}", where=item
                )
            apply(state, record)
        return len(records)

    async def append(
        self, state: SessionState, commit: Commit, *, fence: int | None, claim: bool = False
    ) -> CommitReceipt:
        """Write ``commit`` as seq ``state.seq + 1``, then adopt it into ``state``."""
        if self._settings.read_only:
            raise ReadOnlyStore("this store was opened read-only; it cannot commit")
        if fence is not None and fence < state.fence:
            raise FencedError(
                f"fence {fence} is older than fence {state.fence} already claimed on "
                f"session {state.session_id}; this lease holder must stop",
                session_id=state.session_id,
                fence=fence,
                current=state.fence,
            )
        check(state, commit)
        # The parts were validated when they were built; skip validating them again.
        record = CommitRecord.model_construct(
            session_id=state.session_id,
            seq=state.seq + 1,
            commit_id=os.urandom(16).hex(),
            fence=max(state.fence, fence or 0),
            writer_fence=fence,
            claim=claim,
            writer=self._settings.writer,
            commit=commit,
            committed_at=utcnow(),
        )
        data = encode(
            record,
            limit=self._settings.max_record_bytes,
            what=f"commit {record.seq} of session {state.session_id}",
        )
        was_active = state.is_active
        becomes_active = active_after(state, commit)
        if becomes_active and not was_active:
            await self._index.mark(state.session_id)
        await self._create(record, data)
        apply(state, record)
        if becomes_active and not was_active:
            await self._index.mark(state.session_id)
        elif was_active and not becomes_active:
            await self._index.sweep(state.session_id, finished_at_seq=record.seq)
        return CommitReceipt.model_construct(
            session_id=record.session_id,
            seq=record.seq,
            fence=record.fence,
            committed_at=record.committed_at,
        )

    async def _create(self, record: CommitRecord, data: bytes) -> None:
        partition = layout.log_partition(record.session_id)
        item = layout.seq_item(record.seq)
        try:
            await self._backend.create(partition, item, data)
        except ItemExists:
            existing = await self._backend.get(partition, item)
            if existing is not None and _commit_id(existing, f"{partition}/{item}") == (
                record.commit_id
            ):
                return  # our own write, retried by the transport after a lost response
            raise ConflictError(
                f"session {record.session_id} already has commit {record.seq}: another "
                "writer got there first; reload the session and retry",
                session_id=record.session_id,
                seq=record.seq,
            ) from None


def _commit_id(data: bytes, where: str) -> str:
    return decode(data, CommitRecord, where=where).commit_id
