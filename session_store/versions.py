"""The versions a session applied, by commit seq, without replaying its log.

The log's writer puts an ``AppliedVersion`` at ``session/<sid>/workspace/<seq>.<commit>``
*before* it creates the commit record that moves the head (``CommitLog.append``), so no
applied version is ever missing from the index — an entry written first can only be *false*: its
commit lost the race for the seq (another writer's record is there) or its writer died
before creating it. A reader checks every entry against the log record at its seq (one
read each, ``CONCURRENCY`` at a time), skips the false ones and, the record being final,
deletes them (the repair). An entry whose seq has no record yet is skipped and kept: its
writer may be creating it now. Retention counts entries unchecked: a false one only
keeps a version longer.
"""

from __future__ import annotations

import asyncio
from typing import Final

from contracts import CommitRecord, CorruptRecord
from contracts.commit import Origin
from contracts.workspace import AppliedVersion
from session_store import layout
from session_store.backend import Backend
from session_store.codec import decode, encode

#: log records one listing reads at once to check its entries
CONCURRENCY: Final = 16


class VersionIndex:
    """``session/<sid>/workspace``: seq → the version its commit applied."""

    def __init__(self, backend: Backend, *, read_only: bool) -> None:
        self._backend = backend
        self._read_only = read_only

    async def record(self, session_id: str, entry: AppliedVersion) -> None:
        """Before the commit that applies ``entry.version`` is created."""
        partition = layout.versions_partition(session_id)
        await self._backend.put(partition, _item(entry), encode(entry))

    async def entries(self, session_id: str, *, until: int | None = None) -> list[AppliedVersion]:
        """Every entry of the session's own index up to seq ``until``, unchecked."""
        partition = layout.versions_partition(session_id)
        found = []
        for item, data in await self._backend.items(partition):
            entry = decode(data, AppliedVersion, where=f"{partition}/{item}")
            if until is None or entry.seq <= until:
                found.append(entry)
        return found

    async def applied(
        self, session_id: str, origin: Origin | None, *, until: int | None = None
    ) -> list[AppliedVersion]:
        """The versions the session applied, oldest first, with those its origins had
        applied by its fork point (a fork's history is theirs up to there)."""
        lines: list[tuple[str, int | None]] = [(session_id, until)]
        lines += [(past.session_id, past.seq) for past in origin.lineage()] if origin else []
        found: list[AppliedVersion] = []
        for line_id, bound in reversed(lines):
            found += await self._checked(line_id, await self.entries(line_id, until=bound))
        return found

    async def _checked(
        self, session_id: str, entries: list[AppliedVersion]
    ) -> list[AppliedVersion]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def landed(entry: AppliedVersion) -> bool:
            async with gate:
                return await self._landed(session_id, entry)

        verdicts = await asyncio.gather(*(landed(entry) for entry in entries))
        return [entry for entry, ok in zip(entries, verdicts, strict=True) if ok]

    async def _landed(self, session_id: str, entry: AppliedVersion) -> bool:
        partition = layout.log_partition(session_id)
        item = layout.seq_item(entry.seq)
        data = await self._backend.get(partition, item)
        if data is None:
            return False  # not created (yet): its writer may be creating it now
        record = decode(data, CommitRecord, where=f"{partition}/{item}")
        if record.seq != entry.seq:
            raise CorruptRecord(f"record at {partition}/{item} claims seq {record.seq}")
        if record.commit_id == entry.commit_id and record.commit.workspace == entry.version:
            return True
        if not self._read_only:  # the record at its seq is final: the entry is false
            await self._backend.delete(layout.versions_partition(session_id), _item(entry))
        return False


def _item(entry: AppliedVersion) -> str:
    # The commit's id in the name: writers racing for one seq each leave their own entry
    # (one of them true), never overwrite the winner's.
    return f"{layout.seq_item(entry.seq)}.{entry.commit_id}"
