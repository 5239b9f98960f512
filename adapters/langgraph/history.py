"""Reading a namespace's history: records by ref (cached), and walks from the tips.

Records are immutable and content-addressed, so a record read once is valid forever:
the cache needs no invalidation, only a bound. A walk visits every record reachable
from the tips newest first — by depth, then by id, both descending — each once, even
where branches share ancestors; one record GET per record not yet cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable

from langgraph.checkpoint.serde.base import SerializerProtocol

from adapters.langgraph.journal import Journal
from adapters.langgraph.record import JsonObject, Record, decode_record, ref_of

#: records kept in memory per saver (a few KB each)
CACHE_RECORDS = 512


class Records:
    """Loads records through a journal, keeping the last ``size`` in memory."""

    def __init__(self, journal: Journal, serde: SerializerProtocol, *, size: int = CACHE_RECORDS):
        self._journal = journal
        self._serde = serde
        self._size = size
        self._cache: OrderedDict[str, Record] = OrderedDict()
        self.loads = 0  # records read from the store (for tests and benchmarks)

    def remember(self, digest: str, record: Record) -> None:
        self._cache[digest] = record
        self._cache.move_to_end(digest)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)

    async def load(self, ref: JsonObject) -> Record:
        blob = ref_of(ref)
        found = self._cache.get(blob.digest)
        if found is not None:
            self._cache.move_to_end(blob.digest)
            return found
        record = decode_record(await self._journal.get_blob(blob), blob, self._serde)
        self.loads += 1
        self.remember(blob.digest, record)
        return record


async def walk(records: Records, tips: Iterable[JsonObject]) -> AsyncIterator[Record]:
    """Every record reachable from ``tips``, newest first, each once.

    A k-way merge: the frontier holds one record per open branch; the newest is yielded
    and replaced by its parent. A child is always deeper than its parent, so a record is
    yielded only after all its children reachable from the tips.
    """
    frontier: dict[str, Record] = {}
    seen: set[str] = set()
    for ref in tips:
        record = await records.load(ref)
        frontier.setdefault(record.id, record)
    while frontier:
        newest = max(frontier.values(), key=lambda r: (r.depth, r.id))
        del frontier[newest.id]
        seen.add(newest.id)
        yield newest
        if newest.parent_ref is not None and newest.parent_id not in seen:
            parent = await records.load(newest.parent_ref)
            frontier.setdefault(parent.id, parent)
