"""Retention and collection of workspace versions and blobs (``docs/workspaces.md``).

Blobs are content-addressed and shared by every session, so a blob may be deleted only
when no retained version of *any* session references it, no writer is about to rely on
it, and a collector killed at any step leaves nothing a retained version needs.

**Touches.** Whatever is about to rely on a blob no retained version protects —
``put_file`` before it uploads, ``put_version`` for the manifest and each file not in its
base — first *touches* it (``workspace/touched/<shard>/<digest>``: a fresh random token
and the store's time), then checks that no collector has condemned it. A version's
files in its base need no touch: the base is its call's mount, retained while the
call's intent is open.

**Collection** (``Collector.collect``) of one session's unretained versions:

1. *Mark*: the versions every session retains (the last ``keep_versions`` of its
   versions index, its open intents' mount bases, the versions its open intents'
   stored results produced) and every digest their manifests name.
2. *Candidates*: the manifests and files of the session's other indexed versions that
   are not marked, plus every blob a killed collector left condemned (resumed).
3. For each candidate: skip it if touched within ``grace`` (store clock: invariant 17);
   else **condemn** it (``workspace/condemned/<digest>``), **re-read its touch** and
   skip it (lifting the mark) if that changed; else delete its ref item, its chunks, its
   touch and, last, the mark.

A writer touches then checks for a mark; the collector marks then checks for a touch.
Each writes before it reads, so at least one sees the other: either the collector sees
the new touch and keeps the blob, or the writer sees the mark and does not rely on it
(``put_version`` counts it missing; ``put_file`` refuses with ``ConflictError`` until
the collection is done). A killed collector leaves marks that the next collection
finishes; until then the blob counts as missing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from pydantic import ValidationError

from contracts import CONTROL_DOCUMENT, CorruptRecord, NotFound
from contracts.model import Frozen
from contracts.workspace import RETENTION, Manifest, WorkspaceRetention, WorkspaceVersion
from session_store import layout
from session_store.backend import Backend
from session_store.clock import StoreClock
from session_store.codec import decode, encode
from session_store.state import SessionState

#: how long a touched blob is safe from collection without a retained version: longer
#: than a Hands takes from its first upload to storing the result that names the version
GRACE: Final = timedelta(hours=1)
#: requests one collection keeps in flight at once
CONCURRENCY: Final = 16


class Touch(Frozen):
    """A writer relied on a blob at ``at`` (store time); ``token`` tells touches apart."""

    v: Literal[1] = 1
    type: Literal["workspace_touch"] = "workspace_touch"
    token: str
    at: datetime


@dataclass
class Collected:
    """What one collection did."""

    versions: int = 0
    blobs: int = 0
    kept_young: int = 0
    kept_touched: int = 0
    #: candidates already deleted (by an earlier collection)
    gone: int = 0


#: a session's retained versions (``SessionStore``: retention, open intents, results)
Retained = Callable[[str], Awaitable[list[WorkspaceVersion]]]


class Touches:
    """The touch and condemned marks of workspace blobs (the writers' half)."""

    def __init__(self, backend: Backend, clock: StoreClock) -> None:
        self._backend = backend
        self._clock = clock

    async def touch(self, digest: str) -> Touch:
        touch = Touch(token=os.urandom(8).hex(), at=await self._clock.fresh())
        await self._backend.put(layout.touched_partition(digest), digest, encode(touch))
        return touch

    async def touched(self, digest: str) -> Touch | None:
        partition = layout.touched_partition(digest)
        data = await self._backend.get(partition, digest)
        return None if data is None else _touch_of(data, f"{partition}/{digest}")

    async def condemned(self, digest: str) -> bool:
        return await self._backend.get(layout.CONDEMNED_PARTITION, digest) is not None


class Collector:
    """Deletes the versions and blobs of a session that nothing retains."""

    def __init__(
        self,
        backend: Backend,
        touches: Touches,
        clock: StoreClock,
        *,
        sessions: Callable[[], AsyncIterator[str]],
        retained: Retained,
        indexed: Retained,
        manifest: Callable[[WorkspaceVersion], Awaitable[Manifest]],
        grace: timedelta = GRACE,
    ) -> None:
        self._backend = backend
        self._touches = touches
        self._clock = clock
        self._sessions = sessions
        self._retained = retained
        self._indexed = indexed
        self._manifest = manifest
        self._grace = grace
        self._gate = asyncio.Semaphore(CONCURRENCY)

    async def collect(self, session_id: str) -> Collected:
        cutoff = await self._clock.fresh() - self._grace
        marked = await self._marked()
        done = Collected()
        versions = [v for v in await self._indexed(session_id) if v.id not in marked]
        candidates = await self._resume(marked)
        for version in versions:
            candidates |= await self._digests(version) - marked
        ordered = sorted(candidates)
        swept = await asyncio.gather(*(self._sweep(digest, cutoff) for digest in ordered))
        verdicts = dict(zip(ordered, swept, strict=True))
        for verdict in verdicts.values():
            setattr(done, verdict, getattr(done, verdict) + 1)
        done.versions = sum(verdicts.get(v) == "blobs" for v in {v.id for v in versions})
        return done

    async def collect_orphans(self) -> Collected:
        """Delete every workspace blob touched before the grace period that no retained
        version of any session names: what writers killed between upload and version
        left, and what ``collect`` of each session would delete. One listing of every
        touch (linear in the workspace blobs of the store): run it rarely."""
        cutoff = await self._clock.fresh() - self._grace
        marked = await self._marked()
        done = Collected()
        # a killed collection's marks first, as ``collect`` does: one killed after
        # deleting a blob's touch left a mark no listing of touches finds
        resumed = await self._resume(marked)
        for verdict in await asyncio.gather(*(self._sweep(d, cutoff) for d in resumed)):
            setattr(done, verdict, getattr(done, verdict) + 1)
        for shard in layout.touched_partitions():
            old = [
                item
                for item, data in await self._backend.items(shard)
                if item not in marked
                and item not in resumed
                and ((touch := _touch_of(data, f"{shard}/{item}")) is None or touch.at <= cutoff)
            ]
            for verdict in await asyncio.gather(*(self._sweep(d, cutoff) for d in old)):
                setattr(done, verdict, getattr(done, verdict) + 1)
        return done

    async def _resume(self, marked: set[str]) -> set[str]:
        """The blobs a killed collection condemned that nothing retains (to sweep again);
        its marks on what a retained version now names are lifted."""
        condemned = set(await self._condemned())
        for digest in condemned & marked:
            await self._backend.delete(layout.CONDEMNED_PARTITION, digest)
        return condemned - marked

    async def _marked(self) -> set[str]:
        """Every digest a retained version of any session names (manifest and files)."""
        marked: set[str] = set()
        async for session_id in self._sessions():
            for version in await self._retained(session_id):
                if version.id not in marked:
                    marked |= await self._digests(version)
        return marked

    async def _digests(self, version: WorkspaceVersion) -> set[str]:
        try:
            manifest = await self._manifest(version)
        except (NotFound, CorruptRecord):
            return {version.id}  # its files cannot be known: only the manifest blob
        files = {entry.digest for entry in manifest.entries if entry.digest is not None}
        return {version.id, *files}

    async def _condemned(self) -> list[str]:
        return await self._backend.keys(layout.CONDEMNED_PARTITION)

    async def _sweep(self, digest: str, cutoff: datetime) -> str:
        async with self._gate:
            before = await self._touches.touched(digest)
            if before is None and not await self._backend.keys(layout.blob_partition(digest)):
                await self._backend.delete(layout.CONDEMNED_PARTITION, digest)
                return "gone"
            if before is not None and before.at > cutoff:
                await self._backend.delete(layout.CONDEMNED_PARTITION, digest)
                return "kept_young"
            await self._backend.put(layout.CONDEMNED_PARTITION, digest, b"{}")
            if await self._touches.touched(digest) != before:
                await self._backend.delete(layout.CONDEMNED_PARTITION, digest)
                return "kept_touched"
            await self._delete(digest)
            return "blobs"

    async def _delete(self, digest: str) -> None:
        partition = layout.blob_partition(digest)
        await self._backend.delete(partition, layout.BLOB_REF_ITEM)  # first: not whole
        await _all(self._backend.delete(partition, item) for item in await self._chunks(digest))
        await self._backend.delete(layout.touched_partition(digest), digest)
        await self._backend.delete(layout.CONDEMNED_PARTITION, digest)  # last: done

    async def _chunks(self, digest: str) -> list[str]:
        items = await self._backend.keys(layout.blob_partition(digest))
        return [item for item in items if item != layout.BLOB_REF_ITEM]


def retention_of(state: SessionState) -> WorkspaceRetention:
    """The session's workspace retention (control document member ``retention``, like
    its ``budget``); the default when absent or unreadable."""
    control = state.documents.get(CONTROL_DOCUMENT)
    said = control.body.get(RETENTION) if control and isinstance(control.body, dict) else None
    try:
        return WorkspaceRetention.model_validate(said or {})
    except ValidationError:
        return WorkspaceRetention()


def _touch_of(data: bytes, where: str) -> Touch | None:
    try:
        return decode(data, Touch, where=where)
    except (CorruptRecord, ValidationError):
        return None  # a damaged touch: counted as none (the grace alone then protects)


async def _all(calls: Iterable[Awaitable[None]]) -> None:
    await asyncio.gather(*calls)
