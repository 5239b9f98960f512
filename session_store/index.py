"""The index of active sessions: the reconciler's input, without scanning session logs.

A session is *active* while it has an open task, an open submission or an unsent outbox
message. The index holds one marker item per active session, spread over a fixed set of
shard partitions. Markers are hints kept conservative: a session may be listed after it
finished (the reader loads it and sweeps the marker), but an active session is never
missing, because

* a commit that makes a session active writes the marker before *and* after itself
  (before: survives a crash right after the commit; after: repairs a concurrent sweep);
* a marker is removed only after the remover saw the session finished, and it re-checks
  the log afterwards, restoring the marker when anything was committed meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from session_store import layout, shards
from session_store.backend import Backend


class ActiveIndex:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def mark(self, session_id: str) -> None:
        await self._backend.put(layout.active_partition(session_id), session_id, b"")

    async def sweep(self, session_id: str, *, finished_at_seq: int) -> None:
        """Remove the marker of a session seen finished at ``finished_at_seq``."""
        await self._backend.delete(layout.active_partition(session_id), session_id)
        later = await self._backend.keys(
            layout.log_partition(session_id), after=layout.seq_item(finished_at_seq)
        )
        if later:
            await self.mark(session_id)

    async def sessions(self) -> AsyncIterator[str]:
        for partition in layout.active_partitions():
            for session_id in await self._backend.keys(partition):
                yield session_id

    async def page(
        self, *, after: str | None = None, prefix: str = "", limit: int = 100
    ) -> tuple[list[str], str | None]:
        """Up to ``limit`` marked session ids after ``after`` that begin with ``prefix``,
        in id order, and the cursor of the next page (None: this was the last)."""
        return await shards.page(
            self._backend, layout.active_partitions(), after=after, prefix=prefix, limit=limit
        )
