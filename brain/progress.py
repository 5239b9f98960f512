"""Deferred commits: progress that may be lost (text a model is streaming), saved late.

A phase notes its progress (``PhaseContext.preview``); nothing is written then. The
drive's ``Progress`` keeps the newest preview of each task and writes it into the
``progress`` document at most once per ``interval`` — one commit holding nothing but
that document, built by the lease holder under its fence — so a model streaming 50
tokens a second costs 4 commits a second, not 50. Any other commit the drive makes
(entries, phase changes, acceptances) is written at once and folds the pending
previews in; the commit of a phase's outcome drops its task's preview, which the
outcome now supersedes.

A preview is written again only when its text (or whether it was cut) changed: past the
cap of ``max_chars`` a stream adds nothing a reader sees, so nothing more is written.

Previews drive nothing: no decision reads them. A crash loses at most what arrived
after the last write; what was written stays in the document until the task's next
outcome, and the next attempt of the phase records it in its interruption entry, marked
as a preview and never used as a response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from pydantic import Field, JsonValue

from brain.builder import CommitBuilder
from contracts import PROGRESS_DOCUMENT, DocumentPatch, utcnow
from contracts.model import Frozen

log = logging.getLogger(__name__)


class ProgressSettings(Frozen):
    """How often deferred progress is written, and how much of it."""

    #: at most one progress commit per this interval
    interval: timedelta = timedelta(milliseconds=250)
    #: a preview keeps the first this many characters (then says it was cut)
    max_chars: int = Field(default=8000, ge=1)


class Progress:
    """The pending previews of one drive and their writer."""

    def __init__(self, settings: ProgressSettings) -> None:
        self.settings = settings
        self._text: dict[str, list[str]] = {}
        self._chars: dict[str, int] = {}
        self._request: dict[str, str] = {}
        #: tasks whose preview changed since it was last written: task -> change count
        self._dirty: dict[str, int] = {}
        #: what the commit being built carries (a piece noted meanwhile stays pending)
        self._folded: dict[str, int] = {}
        #: tasks whose outcome was committed: their member goes at the next write
        self._gone: set[str] = set()
        self._news = asyncio.Event()

    def note(self, task_id: str, request: str, piece: str) -> None:
        """A piece of ``task_id``'s text for request ``request`` (a new request starts
        a new preview). The preview is written again only when what a reader sees of it
        changed: past the cap only ``chars`` would, so a capped preview is written once
        more, saying it was cut, and then not again until the next request."""
        fresh = self._request.get(task_id) != request
        if fresh:
            self._request[task_id], self._text[task_id], self._chars[task_id] = request, [], 0
        cap, before = self.settings.max_chars, self._chars[task_id]
        kept = piece[: max(0, cap - before)]
        if kept:
            self._text[task_id].append(kept)
        self._chars[task_id] = before + len(piece)
        cut = (before <= cap) != (self._chars[task_id] <= cap)
        if not (fresh or kept or cut):
            return
        self._dirty[task_id] = self._dirty.get(task_id, 0) + 1
        self._gone.discard(task_id)
        self._news.set()

    def text(self, task_id: str) -> str | None:
        """The preview of ``task_id`` so far (written or not)."""
        parts = self._text.get(task_id)
        return None if parts is None else "".join(parts)

    def settled(self, task_id: str) -> None:
        """``task_id``'s phase has an outcome: its preview is superseded."""
        for kept in (self._text, self._chars, self._request):
            kept.pop(task_id, None)
        self._dirty.pop(task_id, None)
        self._gone.add(task_id)

    @property
    def has_news(self) -> bool:
        """Whether a commit built now would carry previews or their removals."""
        return bool(self._dirty or self._gone)

    def fold(self, builder: CommitBuilder) -> bool:
        """Add the pending previews (and removals) to the commit being built; whether
        there were any (a task that streamed nothing leaves nothing to remove)."""
        stored = builder.document(PROGRESS_DOCUMENT)
        members = stored.body if stored is not None else {}
        patch: dict[str, JsonValue] = {t: None for t in self._gone if t in members}
        self._folded = dict(self._dirty)
        for task_id in self._folded:
            chars = self._chars[task_id]
            patch[task_id] = {
                "request": self._request[task_id],
                "text": "".join(self._text[task_id]),
                "chars": chars,
                "truncated": chars > self.settings.max_chars,
                "at": utcnow().isoformat(),
                "preview": True,
            }
        if patch:
            builder.write(DocumentPatch(name=PROGRESS_DOCUMENT, patch=patch, create=True))
        return bool(patch)

    def written(self) -> None:
        """The folded previews are committed."""
        for task_id, changes in self._folded.items():
            if self._dirty.get(task_id) == changes:
                del self._dirty[task_id]
        self._folded = {}
        self._gone.clear()

    async def run(self, write: Callable[[], Awaitable[object]]) -> None:
        """Write pending previews, at most once per interval, until cancelled."""
        interval = self.settings.interval.total_seconds()
        while True:
            await self._news.wait()
            self._news.clear()
            if self._dirty:
                try:
                    await write()
                except Exception as error:  # a lost preview is allowed; the drive goes on
                    log.debug("a preview was not written: %r", error)
            await asyncio.sleep(interval)
