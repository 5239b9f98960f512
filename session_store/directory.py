"""The directory of every session: one marker per session ever created, listed by id.

The active index (``session_store.index``) forgets a session once it finished; an
operator looking for yesterday's session needs every one. A marker is written before a
session's first commit (so a crash right after the commit never leaves a session out;
a marker whose commit never landed is a session without commits, which readers skip),
and never removed. Markers are spread over fixed shard partitions; a page merges the
shards in id order (``session_store.shards``).
Sessions created before the directory existed are not in it (``bh show`` still reads
them by id).
"""

from __future__ import annotations

import hashlib
from typing import Final

from session_store import shards
from session_store.backend import Backend

SHARDS: Final = 16


def partition(session_id: str) -> str:
    shard = hashlib.sha256(session_id.encode()).digest()[0] % SHARDS
    return f"index/all/{shard:02x}"


def partitions() -> list[str]:
    return [f"index/all/{shard:02x}" for shard in range(SHARDS)]


class SessionDirectory:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def record(self, session_id: str) -> None:
        await self._backend.put(partition(session_id), session_id, b"")

    async def page(
        self, *, after: str | None = None, prefix: str = "", limit: int = 100
    ) -> tuple[list[str], str | None]:
        """Up to ``limit`` session ids after ``after`` that begin with ``prefix``, in id
        order, and the cursor of the next page (None: this was the last)."""
        return await shards.page(
            self._backend, partitions(), after=after, prefix=prefix, limit=limit
        )
