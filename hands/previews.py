"""Output previews: a running operation's log, saved while it runs.

A tool's stdout carries only its result document; what it writes to stderr is its log.
While a run lasts, the sandbox feeds that log to an ``OutputWriter``, which keeps its
last ``keep`` bytes and saves them as the operation's ``OutputPreview``
(``op/<id>/preview``) at most once per ``interval``, and once more when the run ends.
A preview overwrites the last one, may be lost (a save that fails is skipped) and is
never a result. The Session API's event stream reads the previews of a session's open
operations and sends them as ``preview`` events.

Why the store and not NATS core subjects: the event stream already reads only the
store, so a preview reaches a reader that connects late or reconnects, the API needs no
bus credentials, and the rate is bounded (one small overwrite a second per running
operation), which the store carries easily.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from contracts import BrainhandsError, Operation, OutputPreview
from hands.sandbox.output import Capture
from session_store import SessionStore

log = logging.getLogger(__name__)

#: a log larger than this still counts its bytes; only its end is kept
_NO_LIMIT = 1 << 62


class OutputWriter:
    def __init__(
        self,
        store: SessionStore,
        operation: Operation,
        *,
        interval: timedelta = timedelta(seconds=1),
        keep: int = 4096,
    ) -> None:
        self._store = store
        self._operation = operation
        self._interval = interval.total_seconds()
        #: fed by the sandbox (from its follower thread)
        self.log = Capture(_NO_LIMIT, keep, spool=False)
        self._saved = 0

    async def run(self) -> None:
        """Save the log whenever it grew, at most once per interval, until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            await self._save(running=True)

    async def finish(self) -> None:
        """The run ended: save what it wrote last (nothing, when it wrote nothing)."""
        await self._save(running=False)

    async def _save(self, *, running: bool) -> None:
        total = self.log.total
        if total == self._saved and (running or not total):
            return
        preview = OutputPreview(
            operation_id=self._operation.operation_id,
            session_id=self._operation.session_id,
            text=self.log.tail_text(),
            bytes=total,
            running=running,
        )
        try:
            await self._store.put_output_preview(preview)
        except BrainhandsError as error:  # a lost preview is allowed
            log.debug("preview of %s not saved: %s", preview.operation_id, error.message)
            return
        self._saved = total
