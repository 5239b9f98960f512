"""A session opened for reading and committing: its current state and the log behind it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from contracts import Commit, CommitReceipt, Entry, FencedError, Submission, Task
from session_store.archive import Archive, Settled, forget
from session_store.baselines import Baselines
from session_store.log import CommitLog
from session_store.state import SessionState

log = logging.getLogger(__name__)


class SessionHandle:
    """The state of one session as of ``seq``, and the right to append to it.

    ``commit`` uses ``seq`` as the expected seq: it raises ``ConflictError`` when another
    writer committed first (call ``refresh`` and decide again) and ``FencedError`` when a
    newer lease holder has claimed the session. The state changes only after the store
    confirmed a write (persist, then adopt). Treat ``state`` as read-only; it holds open
    work and a recent window, and ``entries``, ``task``, ``submission`` and
    ``is_applied`` read settled history from the archive on demand. ``problems`` lists
    damaged baselines the load skipped.
    """

    def __init__(
        self,
        state: SessionState,
        *,
        log: CommitLog,
        baselines: Baselines,
        archive: Archive,
        baseline_every: int,
        spawn: Callable[[asyncio.Task[None]], None],
        problems: tuple[str, ...] = (),
    ) -> None:
        self._state = state
        self._log = log
        self._baselines = baselines
        self._archive = archive
        self._baseline_every = baseline_every
        self._spawn = spawn
        self.problems = problems

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def session_id(self) -> str:
        return self._state.session_id

    @property
    def seq(self) -> int:
        return self._state.seq

    @property
    def fence(self) -> int:
        return self._state.fence

    @property
    def holder(self) -> str | None:
        """Who claimed the current fence (None when nobody is named)."""
        return self._state.holder

    async def commit(self, commit: Commit, *, fence: int | None) -> CommitReceipt:
        """Append ``commit`` atomically at ``seq + 1``.

        ``fence`` is the caller's lease fence; ``None`` marks an unfenced ingress writer
        (e.g. the Session API accepting a submission), which may only add submissions,
        user input and control-document patches, and can neither raise nor be stopped
        by fences but still needs the expected seq.
        """
        receipt = await self._log.append(self._state, commit, fence=fence)
        if receipt.seq % self._baseline_every == 0:
            self.schedule_baseline()
        return receipt

    async def claim(self, fence: int, *, holder: str) -> CommitReceipt:
        """Claim the session for ``holder`` at ``fence``: from now on lower fences commit
        nothing. A holder that already holds ``fence`` writes nothing; a fence claimed
        by another holder is refused (``FencedError``), like any lower fence."""
        if fence == self._state.fence and self._state.seq > 0:
            if self._state.holder != holder:
                raise FencedError(
                    f"fence {fence} of session {self.session_id} is already claimed by "
                    f"{self._state.holder or 'an unnamed writer'}; claim a higher fence",
                    session_id=self.session_id,
                    fence=fence,
                    holder=self._state.holder,
                )
            return self._head_receipt()
        return await self._log.append(self._state, Commit(), fence=fence, claim=holder)

    async def refresh(self) -> int:
        """Catch up with commits written by others; returns how many were applied."""
        return await self._log.catch_up(self._state)

    async def entries(self, start: int = 0, stop: int | None = None) -> list[Entry]:
        """Entries ``start`` .. ``stop - 1`` of the whole history, reading archives as needed."""
        state = self._state
        stop = state.entry_count if stop is None else min(stop, state.entry_count)
        found: list[Entry] = []
        if start < state.entries_archived:
            found = await self._archive.entries(
                self.session_id,
                start,
                min(stop, state.entries_archived),
                archived=state.entries_archived,
                origin=state.origin,
            )
        lo, hi = max(start, state.entries_archived), stop
        if hi > lo:
            found.extend(
                state.entries_tail[lo - state.entries_archived : hi - state.entries_archived]
            )
        return found

    async def task(self, task_id: str) -> Task | None:
        """A task, open or settled (from the archive when it left the state)."""
        found = self._state.tasks.get(task_id)
        if found is None and self._state.has_archive:
            found = await self._archive.task(self.session_id, task_id, self._state.origin)
        return found

    async def submission(self, request_id: str) -> Submission | None:
        """A submission, open or settled (from the archive when it left the state)."""
        found = self._state.submissions.get(request_id)
        if found is None and self._state.has_archive:
            found = await self._archive.submission(self.session_id, request_id, self._state.origin)
        return found

    async def is_applied(self, operation_id: str) -> bool:
        """Whether the operation's result has entered this session."""
        if operation_id in self._state.applied_operations:
            return True
        return self._state.has_archive and await self._archive.applied(
            self.session_id, operation_id, self._state.origin
        )

    async def write_baseline(self) -> int:
        """Write a baseline of the current state now; returns its seq."""
        snapshot = self._state.snapshot()
        forget(self._state, await self._baselines.write(snapshot))
        return snapshot.seq

    def schedule_baseline(self) -> None:
        """Write a baseline of the state as it is now, in the background.

        Losing it costs only load time. The snapshot is taken here, so the baseline is
        of exactly this seq however late the background write runs.
        """
        if self._state.seq > 0:
            snapshot = self._state.snapshot()
            self._spawn(asyncio.ensure_future(self._background_baseline(snapshot)))

    async def _background_baseline(self, snapshot: SessionState) -> None:
        try:
            settled: Settled = await self._baselines.write(snapshot)
        except Exception:  # a baseline is an optimisation: log and carry on
            log.warning("baseline of session %s failed", self.session_id, exc_info=True)
            return
        forget(self._state, settled)

    def _head_receipt(self) -> CommitReceipt:
        assert self._state.updated_at is not None
        return CommitReceipt(
            session_id=self.session_id,
            seq=self._state.seq,
            fence=self._state.fence,
            committed_at=self._state.updated_at,
        )
