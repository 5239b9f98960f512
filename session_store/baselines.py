"""Baselines: the materialised state at a seq, so a load replays only the tail after it.

A baseline is a create-once record holding the state — inline when it is small, which
it usually is because the state holds open work only, else in a blob it points at.
Writing one first moves settled history into the archive (``session_store.archive``),
so neither the baseline nor the load grows with the length of the session.

Baselines are never needed for correctness: the log is the truth. So an unreadable
baseline (a torn upload, disk damage, a version this code does not read) is skipped —
the loader takes the previous one, or replays the log — and reported; a later baseline
supersedes it. Pruning deletes a baseline's state blob with its record: the blob holds
the session id and seq, so no other record can refer to it. State blobs are journaled
while they are uploaded (``session_store.uploads``), so a writer that dies mid-way
leaves nothing behind for good.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from contracts import BlobRef, NotFound, RecordError
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow
from session_store import layout
from session_store.archive import Archive, Settled
from session_store.backend import Backend, ItemExists
from session_store.blobs import BlobStore
from session_store.codec import decode, encode
from session_store.state import SessionState
from session_store.uploads import Uploads, is_upload

log = logging.getLogger(__name__)


class BaselineRecord(Frozen):
    """The state after commit ``seq``: ``inline``, or in the ``state`` blob."""

    v: Literal[1] = 1
    type: Literal["baseline"] = "baseline"
    session_id: Identifier
    seq: int = Field(ge=1)
    state: BlobRef | None = None
    inline: SessionState | None = None
    written_at: AwareDatetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _one_state(self) -> BaselineRecord:
        if (self.state is None) == (self.inline is None):
            raise ValueError("a baseline holds its state either inline or in a blob")
        return self


@dataclass(frozen=True)
class Loaded:
    """The newest readable baseline's state (None: replay the whole log), and what was
    skipped on the way to it."""

    state: SessionState | None
    problems: tuple[str, ...] = ()


class Baselines:
    def __init__(
        self,
        backend: Backend,
        blobs: BlobStore,
        archive: Archive,
        uploads: Uploads,
        *,
        kept: int,
        inline_limit: int,
    ) -> None:
        self._backend = backend
        self._blobs = blobs
        self._archive = archive
        self._uploads = uploads
        self._kept = kept
        self._inline_limit = inline_limit

    async def write(self, snapshot: SessionState) -> Settled:
        """Archive settled history out of ``snapshot`` (a private copy), then persist it
        as the baseline at its seq; returns what was archived."""
        settled = await self._archive.settle(snapshot)
        sid = snapshot.session_id
        blob = None
        data = encode(BaselineRecord(session_id=sid, seq=snapshot.seq, inline=snapshot))
        if len(data) > self._inline_limit:
            blob = await self._uploads.put(sid, snapshot.seq, encode(snapshot))
            data = encode(BaselineRecord(session_id=sid, seq=snapshot.seq, state=blob))
        partition = layout.baseline_partition(sid)
        item = layout.seq_item(snapshot.seq)
        try:
            await self._backend.create(partition, item, data)
        except ItemExists:
            await self._supersede(partition, item, data)
        if blob is not None:
            await self._uploads.done(sid, blob)
        await self._prune(sid)
        return settled

    async def latest(self, session_id: str) -> Loaded:
        partition = layout.baseline_partition(session_id)
        newest = await self._backend.last(partition)
        if newest is None:
            return Loaded(None)
        problems: list[str] = []
        state = await self._read(partition, *newest, problems)
        if state is not None:
            return Loaded(state)
        for item in reversed(await self._backend.keys(partition)):
            if is_upload(item):
                continue
            data = None if item >= newest[0] else await self._backend.get(partition, item)
            state = None if data is None else await self._read(partition, item, data, problems)
            if state is not None:
                break
        return Loaded(state, tuple(problems))

    async def at_or_before(self, session_id: str, seq: int) -> Loaded:
        """The newest readable baseline at ``seq`` or before it (None: replay the log
        from its start); only the newest few baselines are kept."""
        partition = layout.baseline_partition(session_id)
        problems: list[str] = []
        wanted = layout.seq_item(seq)
        for item in reversed(await self._backend.keys(partition)):
            if is_upload(item) or item > wanted:
                continue
            data = await self._backend.get(partition, item)
            state = None if data is None else await self._read(partition, item, data, problems)
            if state is not None:
                return Loaded(state, tuple(problems))
        return Loaded(None, tuple(problems))

    async def _read(
        self, partition: str, item: str, data: bytes, problems: list[str]
    ) -> SessionState | None:
        where = f"{partition}/{item}"
        try:
            record = decode(data, BaselineRecord, where=where)
            if record.inline is not None:
                return record.inline
            assert record.state is not None
            blob = await self._blobs.get(record.state)
            return decode(blob, SessionState, where=f"blob {record.state.digest}")
        except (RecordError, NotFound) as error:
            problem = f"baseline {where} skipped: {error.message}"
            log.warning("%s; loading from an older baseline or the log instead", problem)
            problems.append(problem)
            return None

    async def _supersede(self, partition: str, item: str, data: bytes) -> None:
        # Another writer baselined the same seq: the same state by construction, unless
        # the record there is damaged; then ours replaces it.
        existing = await self._backend.get(partition, item)
        if existing == data:
            return
        try:
            decode(existing or b"", BaselineRecord, where=f"{partition}/{item}")
        except RecordError:
            log.warning("replacing the damaged baseline %s/%s", partition, item)
            await self._backend.put(partition, item, data)

    async def _prune(self, session_id: str) -> None:
        # Keep a few for readers that listed them a moment ago; a reader that still loses
        # the race finds the blob gone and falls back like after any unreadable baseline.
        partition = layout.baseline_partition(session_id)
        listed = await self._backend.keys(partition)
        uploads = [item for item in listed if is_upload(item)]
        records = [item for item in listed if not is_upload(item)]
        for item in records[: -self._kept]:
            state = await self._state_ref(partition, item)
            if state is not None:
                await self._blobs.delete(state)  # the blob first: no orphan on a crash
            await self._backend.delete(partition, item)
        retained = records[-self._kept :]

        async def referenced() -> set[str]:
            states = [await self._state_ref(partition, item) for item in retained]
            return {state.digest for state in states if state is not None}

        if uploads and retained:
            await self._uploads.sweep(
                session_id, uploads, below=int(retained[-1]), referenced=referenced
            )

    async def _state_ref(self, partition: str, item: str) -> BlobRef | None:
        data = await self._backend.get(partition, item)
        try:
            return None if data is None else decode(data, BaselineRecord, where=item).state
        except RecordError:
            return None  # nothing readable to follow
