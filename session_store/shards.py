"""Keys spread over fixed shard partitions, read back in key order: a page merges one
bounded read per shard, so listing costs the same whatever the total (the directory of
every session and the active index both page this way)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from session_store.backend import Backend

#: the greatest code point: a key ending with it sorts after every key it begins
_MAX_CHAR: Final = "\U0010ffff"


async def page(
    backend: Backend,
    partitions: Sequence[str],
    *,
    after: str | None = None,
    prefix: str = "",
    limit: int = 100,
) -> tuple[list[str], str | None]:
    """Up to ``limit`` keys of ``partitions`` after ``after`` that begin with ``prefix``,
    in key order, and the cursor of the next page (None: this was the last)."""
    start = max(after or "", _before(prefix)) or None
    pages = await asyncio.gather(
        *(backend.items(part, after=start, limit=limit + 1) for part in partitions)
    )
    found = sorted(name for shard in pages for name, _ in shard if name.startswith(prefix))
    if len(found) > limit:
        return found[:limit], found[limit - 1]
    return found, None


def _before(prefix: str) -> str:
    """A key below every key that begins with ``prefix`` (and above most that do not)."""
    if not prefix:
        return ""
    return prefix[:-1] + chr(ord(prefix[-1]) - 1) + _MAX_CHAR
