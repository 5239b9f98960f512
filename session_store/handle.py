"""A session opened for reading and committing: its current state and the log behind it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from contracts import BlobRef, Commit, CommitReceipt, Entry
from session_store.baselines import Baselines
from session_store.log import CommitLog
from session_store.state import SessionState

log = logging.getLogger(__name__)


class SessionHandle:
    """The state of one session as of ``seq``, and the right to append to it.

    ``commit`` uses ``seq`` as the expected seq: it raises ``ConflictError`` when another
    writer committed first (call ``refresh`` and decide again) and ``FencedError`` when a
    newer lease holder has claimed the session. The state changes only after the store
    confirmed a write (persist, then adopt). Treat ``state`` as read-only.
    """

    def __init__(
        self,
        state: SessionState,
        *,
        log: CommitLog,
        baselines: Baselines,
        baseline_every: int,
        spawn: Callable[[asyncio.Task[None]], None],
    ) -> None:
        self._state = state
        self._log = log
        self._baselines = baselines
        self._baseline_every = baseline_every
        self._spawn = spawn

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

    async def commit(self, commit: Commit, *, fence: int | None) -> CommitReceipt:
        """Append ``commit`` atomically at ``seq + 1``.

        ``fence`` is the caller's lease fence; ``None`` marks an unfenced ingress writer
        (e.g. the Session API accepting a submission), which can neither raise nor be
        stopped by fences but still needs the expected seq.
        """
        receipt = await self._log.append(self._state, commit, fence=fence)
        if receipt.seq % self._baseline_every == 0:
            self.schedule_baseline()
        return receipt

    async def claim(self, fence: int) -> CommitReceipt:
        """Raise the session's fence to ``fence``: from now on lower fences commit nothing."""
        if fence == self._state.fence and self._state.seq > 0:
            return self._head_receipt()
        # A lower fence is refused by the log like any fenced commit.
        return await self._log.append(self._state, Commit(), fence=fence, claim=True)

    async def refresh(self) -> int:
        """Catch up with commits written by others; returns how many were applied."""
        return await self._log.catch_up(self._state)

    async def entries(self, start: int = 0, stop: int | None = None) -> list[Entry]:
        """Entries ``start`` .. ``stop - 1`` of the whole history, reading archives as needed."""
        state = self._state
        stop = state.entry_count if stop is None else min(stop, state.entry_count)
        found: list[Entry] = []
        if start < state.entries_archived:
            for segment in await self._baselines.segments(state.entry_index):
                if segment.first + segment.count > start and segment.first < stop:
                    archived = await self._baselines.segment(segment)
                    found.extend(archived[max(0, start - segment.first) : stop - segment.first])
        lo, hi = max(start, state.entries_archived), stop
        if hi > lo:
            found.extend(
                state.entries_tail[lo - state.entries_archived : hi - state.entries_archived]
            )
        return found

    async def write_baseline(self) -> int:
        """Write a baseline of the current state now; returns its seq."""
        snapshot = self._state.snapshot()
        await self._write_baseline(
            snapshot, (self._state.entry_index, self._state.entries_archived)
        )
        return snapshot.seq

    def schedule_baseline(self) -> None:
        """Write a baseline of the state as it is now, in the background.

        Losing it costs only load time. The snapshot is taken here, so the baseline is
        of exactly this seq however late the background write runs.
        """
        if self._state.seq > 0:
            snapshot = self._state.snapshot()
            archive = (self._state.entry_index, self._state.entries_archived)
            self._spawn(asyncio.ensure_future(self._background_baseline(snapshot, archive)))

    async def _background_baseline(
        self, snapshot: SessionState, before: tuple[BlobRef | None, int]
    ) -> None:
        try:
            await self._write_baseline(snapshot, before)
        except Exception:  # a baseline is an optimisation: log and carry on
            log.warning("baseline of session %s failed", self.session_id, exc_info=True)

    async def _write_baseline(
        self, snapshot: SessionState, before: tuple[BlobRef | None, int]
    ) -> None:
        await self._baselines.write(snapshot)
        self._forget_archived(before, snapshot)

    def _forget_archived(self, before: tuple[BlobRef | None, int], snapshot: SessionState) -> None:
        # Drop archived entries from memory, unless another baseline of this handle
        # archived meanwhile (then keeping them is merely wasteful, never wrong).
        state = self._state
        if (state.entry_index, state.entries_archived) != before:
            return
        archived = snapshot.entries_archived - state.entries_archived
        state.entry_index = snapshot.entry_index
        state.entries_archived = snapshot.entries_archived
        state.entries_tail = state.entries_tail[archived:]

    def _head_receipt(self) -> CommitReceipt:
        assert self._state.updated_at is not None
        return CommitReceipt(
            session_id=self.session_id,
            seq=self._state.seq,
            fence=self._state.fence,
            committed_at=self._state.updated_at,
        )
