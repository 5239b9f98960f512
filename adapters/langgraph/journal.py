"""Where a LangGraph saver reads and commits: a ``Journal``.

The saver never holds a ``SessionHandle`` itself: every change it makes is one commit
built by a function of the session's current documents, handed to a journal that owns
the fence and the write. In a Brain that is the drive's step journal (under the drive's
lock and lease); ``SessionJournal`` is the standalone one for scripts and LangGraph's
conformance suite: a store plus a fence this journal claimed on each session it opens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from contracts import BlobRef, Commit, ConflictError, Document, StoreUnavailable
from session_store import SessionHandle, SessionStore

#: builds one commit from the session's current documents (called again after a lost race)
Build = Callable[[Mapping[str, Document]], Commit]

#: how often a commit is rebuilt after losing the seq race to an unfenced writer
_ATTEMPTS = 20


class Journal(Protocol):
    """Reads a session's documents and commits under the writer's fence.

    ``commit`` calls ``build`` with the newest documents it knows and writes the result
    as one commit; after a lost seq race it catches up and builds again. It raises
    ``FencedError`` once a newer lease holder has claimed the session, and whatever a
    refused write raises (``VersionMismatch`` for a stale ``expected_version``).
    """

    async def document(self, session_id: str, name: str) -> Document | None: ...

    async def commit(self, session_id: str, build: Build) -> None: ...

    async def put_blob(self, data: bytes, media_type: str) -> BlobRef: ...

    async def get_blob(self, ref: BlobRef) -> bytes: ...


@dataclass
class _Session:
    handle: SessionHandle
    fence: int | None = None  # claimed on the first commit
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionJournal:
    """A journal on a store for code that runs outside a Brain.

    Reading a session writes nothing. The first commit to a session claims the next
    fence on it for ``holder``, so a journal that commits later on the same session
    (another process resuming the graph) fences this one out: its commits then raise
    ``FencedError`` and change nothing. Commits to one session are serialized here, as
    the drive's lock does in a Brain.
    """

    def __init__(self, store: SessionStore, *, holder: str) -> None:
        self._store = store
        self._holder = holder
        self._sessions: dict[str, _Session] = {}
        self._opening = asyncio.Lock()

    async def document(self, session_id: str, name: str) -> Document | None:
        session = await self._session(session_id)
        return session.handle.state.documents.get(name)

    async def commit(self, session_id: str, build: Build) -> None:
        session = await self._session(session_id)
        async with session.lock:
            for _ in range(_ATTEMPTS):
                try:
                    fence = await self._fence(session)
                    await session.handle.commit(build(session.handle.state.documents), fence=fence)
                    return
                except ConflictError:  # an unfenced writer took the seq: catch up, rebuild
                    await session.handle.refresh()
        raise StoreUnavailable(
            f"session {session_id}: {_ATTEMPTS} commits in a row lost the seq race; "
            "giving up for now"
        )

    async def put_blob(self, data: bytes, media_type: str) -> BlobRef:
        return await self._store.put_blob(data, media_type)

    async def get_blob(self, ref: BlobRef) -> bytes:
        return await self._store.get_blob(ref)

    async def _session(self, session_id: str) -> _Session:
        async with self._opening:
            if session_id not in self._sessions:
                self._sessions[session_id] = _Session(await self._store.session(session_id))
            return self._sessions[session_id]

    async def _fence(self, session: _Session) -> int:
        if session.fence is None:
            await session.handle.claim(session.handle.fence + 1, holder=self._holder)
            session.fence = session.handle.fence
        return session.fence
