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

**Quiet marks.** An active session may need nothing until someone else acts: its tasks
wait for a person's answer, a child, a timer Redis holds. A Brain whose drive (or look)
ended so marks it *quiet* as of the seq it saw, in a second set of shards beside the
active one, and re-checks the log afterwards (a commit it did not see: the mark is taken
back). Every unfenced commit — an answer, a submission, a cancel, an operator's decision,
all from outside the lease holder — takes the mark back after it lands. The audit
(``scheduler``) then loads only the active sessions that are not quiet, so its pass
costs what needs attention, not what merely waits; quiet marks are hints too: the audit
after Redis lost data reads every active session, and each periodic audit also checks a
rotating slice of the quiet marks (``verify``: the mark's seq against the log, two small
reads, no load), which finds a mark a crash left stale (a writer that died between its
commit and taking the mark back, while a Brain marked it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

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
        await self._backend.delete(layout.quiet_partition(session_id), session_id)
        if await self._later(session_id, finished_at_seq):
            await self.mark(session_id)

    async def quiet(self, session_id: str, *, seq: int) -> bool:
        """Mark the session quiet as of ``seq`` (its drive found nothing to do); False,
        and no mark, when the log has moved on since."""
        await self._backend.put(layout.quiet_partition(session_id), session_id, str(seq).encode())
        if await self._later(session_id, seq):
            await self.unquiet(session_id)
            return False
        return True

    async def unquiet(self, session_id: str) -> None:
        """Take the session's quiet mark back (a commit it did not see landed)."""
        await self._backend.delete(layout.quiet_partition(session_id), session_id)

    async def _later(self, session_id: str, seq: int) -> bool:
        """Whether the session's log holds a commit after ``seq``."""
        later = await self._backend.keys(
            layout.log_partition(session_id), after=layout.seq_item(seq)
        )
        return bool(later)

    async def sessions(self, *, verify: Callable[[str], bool] | None = None) -> AsyncIterator[str]:
        """The marked sessions, shard by shard. With ``verify``, the ones marked quiet are
        left out (two listings per shard), but for those ``verify(session_id)`` picks
        whose mark the log has moved past (a stale mark: two reads each)."""
        for partition, quiet in zip(
            layout.active_partitions(), layout.quiet_partitions(), strict=True
        ):
            marked: set[str] = set()
            if verify is not None:
                marked = set(await self._backend.keys(quiet))
            for session_id in await self._backend.keys(partition):
                if session_id not in marked or (
                    verify is not None and verify(session_id) and await self._stale(session_id)
                ):
                    yield session_id

    async def _stale(self, session_id: str) -> bool:
        """Whether the session's quiet mark is older than its log (or unreadable)."""
        value = await self._backend.get(layout.quiet_partition(session_id), session_id)
        if value is None:
            return True  # taken back since the listing: not quiet any more
        try:
            seq = int(value)
        except ValueError:
            return True
        return await self._later(session_id, seq)

    async def page(
        self, *, after: str | None = None, prefix: str = "", limit: int = 100
    ) -> tuple[list[str], str | None]:
        """Up to ``limit`` marked session ids after ``after`` that begin with ``prefix``,
        in id order, and the cursor of the next page (None: this was the last)."""
        return await shards.page(
            self._backend, layout.active_partitions(), after=after, prefix=prefix, limit=limit
        )
