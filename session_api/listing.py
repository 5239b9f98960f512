"""Listing sessions: the active ones (the active index) or, with ``all``, every session
(the store's directory), both paged in id order with ``after``, narrowed by status, kind
and id prefix, and by what the caller's token covers.

Each listed session is loaded for its summary (``LOADS`` at once). Filters are applied
to the summaries, so a filtered page reads at most ``SCAN_FACTOR`` times its limit of
ids before it answers with what it found and the cursor to go on from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Final

from contracts import BrainhandsError
from session_api.describe import session_summary
from session_api.views import SessionList, SessionStatus, SessionSummary
from session_store import SessionStore
from webapi.auth import Grant

#: Sessions loaded at once when listing.
LOADS: Final = 8
#: A filtered or restricted list reads at most this many times its limit of ids.
SCAN_FACTOR: Final = 10
_NEVER: Final = datetime.min.replace(tzinfo=UTC)


#: one page of a sharded index: ``(ids, cursor of the next page)``
Pages = Callable[..., Awaitable[tuple[list[str], str | None]]]

_MATCHES: Final[dict[SessionStatus, Callable[[SessionSummary], bool]]] = {
    SessionStatus.ACTIVE: lambda s: s.active,
    SessionStatus.FINISHED: lambda s: not s.active,
    SessionStatus.BLOCKED: lambda s: s.blocked > 0,
    SessionStatus.WAITING_FOR_INPUT: lambda s: s.waiting_for_input > 0,
}


class Listing:
    def __init__(
        self,
        store: SessionStore,
        grant: Grant,
        *,
        limit: int,
        status: SessionStatus | None = None,
        prefix: str = "",
        kind: str | None = None,
    ) -> None:
        self.store = store
        self.grant = grant
        self.limit = limit
        self.status = status
        self.prefix = prefix
        self.kind = kind
        self._loads = asyncio.Semaphore(LOADS)

    def _wanted(self, summary: SessionSummary) -> bool:
        if self.kind is not None and self.kind not in summary.kinds:
            return False
        return self.status is None or _MATCHES[self.status](summary)

    async def active(self, after: str | None = None) -> SessionList:
        """The active index's sessions after ``after``: each page holds the next ids in
        id order, shown newest first; a session the index still lists after it finished
        is left out (the reconciler sweeps its marker)."""
        found = await self._paged(self.store.index.page, after, lambda s: s.active)
        found.sessions.sort(key=lambda s: s.updated_at or _NEVER, reverse=True)
        return found

    async def every(self, after: str | None = None) -> SessionList:
        """Every session from the directory, in id order, after ``after``."""
        return await self._paged(self.store.directory.page, after, lambda s: s.seq > 0)

    async def _paged(
        self, source: Pages, after: str | None, listed: Callable[[SessionSummary], bool]
    ) -> SessionList:
        """The sessions of ``source`` after ``after`` that are ``listed`` and wanted; a
        page ends at ``limit`` sessions or ``SCAN_FACTOR`` times as many ids read."""
        found: list[SessionSummary] = []
        cursor, budget = after, self.limit * SCAN_FACTOR
        while budget > 0:
            page = min(self.limit, budget)
            ids, more = await source(after=cursor, prefix=self.prefix, limit=page)
            budget -= len(ids)
            for summary in await self._summaries([s for s in ids if self.grant.covers(s)]):
                shown = listed(summary) or summary.problem is not None
                if shown and self._wanted(summary):
                    found.append(summary)
            if len(found) >= self.limit:
                last = found[self.limit - 1].session_id
                rest = more is not None or found[-1].session_id != last
                return SessionList(
                    sessions=found[: self.limit], truncated=rest, next_after=last if rest else None
                )
            if more is None:
                return SessionList(sessions=found)
            cursor = more
        return SessionList(sessions=found, truncated=True, next_after=cursor)

    async def _summaries(self, session_ids: list[str]) -> list[SessionSummary]:
        return list(await asyncio.gather(*(self._summary(s) for s in session_ids)))

    async def _summary(self, session_id: str) -> SessionSummary:
        async with self._loads:
            try:
                handle = await self.store.session(session_id)
            except BrainhandsError as error:  # one bad session must not hide the others
                return SessionSummary(
                    session_id=session_id,
                    seq=0,
                    active=True,
                    open_tasks=0,
                    open_submissions=0,
                    blocked=0,
                    problem=f"{error.code}: {error.message}",
                )
        return session_summary(handle.state)
