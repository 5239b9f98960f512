"""Listing sessions: the active ones (the active index, newest first) or, with ``all``,
every session (the store's directory, in id order, paged with ``after``), narrowed by
status and id prefix, and by what the caller's token covers.

Each listed session is loaded for its summary (``LOADS`` at once). Filters are applied
to the summaries, so a filtered page reads at most ``SCAN_FACTOR`` times its limit of
ids before it answers with what it found and the cursor to go on from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from contracts import BrainhandsError, InvalidInput
from session_api.describe import session_summary
from session_api.views import SessionList, SessionStatus, SessionSummary
from session_store import SessionStore
from webapi.auth import Grant

#: Sessions loaded at once when listing.
LOADS: Final = 8
#: A filtered or restricted list reads at most this many times its limit of ids.
SCAN_FACTOR: Final = 10
_NEVER: Final = datetime.min.replace(tzinfo=UTC)


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

    async def active(self) -> SessionList:
        """The active index's sessions, newest first."""
        narrowed = self.grant.restricted or self.status or self.prefix or self.kind
        scan = self.limit * SCAN_FACTOR if narrowed else self.limit
        scanned, complete = await self.store.some_active_sessions(scan)
        ids = [s for s in scanned if self.grant.covers(s) and s.startswith(self.prefix)]
        found = [s for s in await self._summaries(ids) if self._wanted(s)]
        complete = complete and len(found) <= self.limit
        ordered = sorted(found, key=lambda s: s.updated_at or _NEVER, reverse=True)
        return SessionList(sessions=ordered[: self.limit], truncated=not complete)

    async def every(self, after: str | None = None) -> SessionList:
        """Every session from the directory, in id order, after ``after``; a page ends
        at ``limit`` sessions or ``SCAN_FACTOR`` times as many ids read."""
        found: list[SessionSummary] = []
        cursor, budget = after, self.limit * SCAN_FACTOR
        while budget > 0:
            ids, more = await self.store.directory.page(
                after=cursor, prefix=self.prefix, limit=min(self.limit, budget)
            )
            budget -= len(ids)
            for summary in await self._summaries([s for s in ids if self.grant.covers(s)]):
                written = summary.seq > 0 or summary.problem is not None
                if written and self._wanted(summary):
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


def check_paging(every: bool, after: str | None) -> None:
    if after is not None and not every:
        raise InvalidInput("after pages the list of every session: add all=true", field="after")
