"""The directory of every session: one marker per session ever created, listed by id.

The active index (``session_store.index``) forgets a session once it finished; an
operator looking for yesterday's session needs every one. A marker is written before a
session's first commit (so a crash right after the commit never leaves a session out;
a marker whose commit never landed is a session without commits, which readers skip),
and never removed. Markers are spread over fixed shard partitions; a page merges the
shards in id order, so listing costs one bounded read per shard, whatever the total.
Sessions created before the directory existed are not in it (``bh show`` still reads
them by id).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Final

from session_store.backend import Backend

SHARDS: Final = 16
#: the greatest code point: a key ending with it sorts after every key it begins
_MAX_CHAR: Final = "\U0010ffff"


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
        start = max(after or "", _before(prefix)) or None
        pages = await asyncio.gather(
            *(self._backend.items(part, after=start, limit=limit + 1) for part in partitions())
        )
        found = sorted(name for page in pages for name, _ in page if name.startswith(prefix))
        if len(found) > limit:
            return found[:limit], found[limit - 1]
        return found, None


def _before(prefix: str) -> str:
    """A key below every key that begins with ``prefix`` (and above most that do not)."""
    if not prefix:
        return ""
    return prefix[:-1] + chr(ord(prefix[-1]) - 1) + _MAX_CHAR
