"""The scheduler's collection pass: workspace blobs that nothing retains are deleted.

Every ``collect_every`` (an hour; ``BH_SCHEDULER_COLLECT_SECONDS``) one scheduler of
the fleet runs ``store.workspaces.collect_orphans()`` (``session_store.collection``):
every blob touched before the grace period that no retained version of any session
names — what each session's retention lets go, and what a writer killed between its
uploads and its version left. The pass is taken in turn (``scheduler.turns``, work
``collect``): the first scheduler to ask within a period does it, the others skip it.
Two collections side by side are safe (the collector is crash- and race-safe), only
wasteful — a pass lists every touch of the store — so a scheduler that just started
neither claims the turn (as the audit does) nor passes at once: its first pass is a
period later, and only if nobody took the turn within the period, so restarts add no
passes. Errors are logged and the next period tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import timedelta
from typing import Final

from contracts import BrainhandsError
from scheduler.turns import Turns
from session_store import SessionStore
from session_store.collection import Collected

log = logging.getLogger(__name__)

#: the turn's name in Redis (``<prefix>:turn:collect``)
COLLECT_TURN: Final = "collect"
#: the turn lapses a little before the next period, so its holder can take it on time
_TURN_SHARE: Final = 0.9


class CollectionPass:
    """Periodic ``collect_orphans`` of one scheduler, in turn with the others."""

    def __init__(
        self, store: SessionStore, *, turns: Turns | None, name: str, every: timedelta
    ) -> None:
        self.store = store
        self.turns = turns
        self.name = name
        self.every = every
        #: what this scheduler's passes deleted: ``versions`` and ``blobs``
        self.collected: Counter[str] = Counter()
        #: passes this scheduler ran (not the ones it left to another's turn)
        self.passes = 0

    async def collect(self) -> Collected | None:
        """One pass, if it is this scheduler's turn: what it did (None: another
        scheduler's turn)."""
        if self.turns is not None and not await self.turns.take(
            COLLECT_TURN, self.name, hold=self.every * _TURN_SHARE
        ):
            return None
        done = await self.store.workspaces.collect_orphans()
        self.passes += 1
        self.collected["versions"] += done.versions
        self.collected["blobs"] += done.blobs
        log.info(
            "workspace collection: %d version(s) and %d blob(s) deleted; kept %d young and "
            "%d touched meanwhile; %d already gone",
            done.versions,
            done.blobs,
            done.kept_young,
            done.kept_touched,
            done.gone,
        )
        return done

    async def run(self) -> None:
        """A pass every ``every``, the first one period after start: a scheduler that
        starts spends its first moments on the audit, not on a scan of every blob."""
        while True:
            await asyncio.sleep(self.every.total_seconds())
            try:
                await self.collect()
            except BrainhandsError as error:
                log.warning("workspace collection failed: %s", error.message)
