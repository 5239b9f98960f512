"""The commit log of a session: create-once records at seq 1, 2, 3, … — the protocol.

Appending commit n+1 is one create-once write of item n+1. Two writers that both loaded
seq n race for the same item; the store lets exactly one create it, the other gets
``ConflictError`` and must reload. Because every record carries the fence high-water
mark, and fences may only grow along the log, a writer whose fence is lower than the
one recorded at its expected seq is refused before it writes (``FencedError``).

Records that left the state for the archive still count: a commit that creates a task or
submission, or applies an operation, that the state no longer holds is checked against
the archive first (one read each), so ids stay unique and results enter a session once.
"""

from __future__ import annotations

import asyncio
import logging
import os

from contracts import (
    AlreadyApplied,
    AlreadyExists,
    BrainhandsError,
    Commit,
    CommitReceipt,
    CommitRecord,
    ConflictError,
    CorruptRecord,
    FencedError,
    Fork,
    InvalidInput,
    InvalidTransition,
    NotFound,
    ReadOnlyStore,
    utcnow,
)
from contracts.workspace import AppliedVersion, WorkspaceVersion
from session_store import layout
from session_store.archive import Archive
from session_store.backend import Backend, ItemExists
from session_store.baselines import Baselines, Loaded
from session_store.codec import decode, encode
from session_store.directory import SessionDirectory
from session_store.index import ActiveIndex
from session_store.settings import StoreSettings
from session_store.state import SessionState, active_after, apply, check, forked
from session_store.versions import VersionIndex
from session_store.workspaces import WorkspaceStore

log = logging.getLogger(__name__)


class CommitLog:
    def __init__(
        self,
        backend: Backend,
        baselines: Baselines,
        archive: Archive,
        index: ActiveIndex,
        settings: StoreSettings,
        directory: SessionDirectory,
        workspaces: WorkspaceStore,
        versions: VersionIndex,
    ) -> None:
        self._backend = backend
        self._baselines = baselines
        self._archive = archive
        self._index = index
        self._directory = directory
        self._workspaces = workspaces
        self._versions = versions
        self._settings = settings

    async def load(self, session_id: str) -> tuple[SessionState, int, Loaded]:
        """The current state, how many commits were replayed after the baseline, and
        the baseline load (with any damaged baselines it skipped)."""
        loaded = await self._baselines.latest(session_id)
        state = loaded.state or SessionState(session_id=session_id)
        return state, await self.catch_up(state), loaded

    async def load_at(self, session_id: str, seq: int) -> tuple[SessionState, Loaded]:
        """The state as it was right after commit ``seq``: the newest baseline at or
        before it, plus the commits up to it. ``NotFound`` past the head."""
        loaded = await self._baselines.at_or_before(session_id, seq)
        state = loaded.state or SessionState(session_id=session_id)
        await self.catch_up(state, until=seq)
        if state.seq != seq:
            raise NotFound(
                f"session {session_id!r} has {state.seq} commits, not {seq}",
                session_id=session_id,
                head=state.seq,
            )
        return state, loaded

    async def records(self, session_id: str, *, after: int, limit: int) -> list[CommitRecord]:
        """Up to ``limit`` commit records after seq ``after``, in order, each checked to
        be the seq it is stored as (a gap or a misplaced record is ``CorruptRecord``)."""
        partition = layout.log_partition(session_id)
        items = await self._backend.items(partition, after=layout.seq_item(after), limit=limit)
        found = []
        for number, (item, data) in enumerate(items, start=after + 1):
            where = f"{partition}/{item}"
            record = decode(data, CommitRecord, where=where)
            if record.seq != number or layout.seq_item(record.seq) != item:
                raise CorruptRecord(
                    f"record at {where} claims seq {record.seq}; expected {number}", where=where
                )
            found.append(record)
        return found

    async def catch_up(self, state: SessionState, *, until: int | None = None) -> int:
        """Apply every commit after ``state.seq`` (up to ``until``); returns how many."""
        partition = layout.log_partition(state.session_id)
        limit = None if until is None else max(0, until - state.seq)
        if limit == 0:
            return 0
        records = await self._backend.items(
            partition, after=layout.seq_item(state.seq), limit=limit
        )
        for item, data in records:
            record = decode(data, CommitRecord, where=f"{partition}/{item}")
            if layout.seq_item(record.seq) != item:
                raise CorruptRecord(
                    f"record at {partition}/{item} claims seq {record.seq}", where=item
                )
            if record.commit.fork is not None and state.seq == 0:
                _become(state, await self._forked(state.session_id, record.commit.fork))
            apply(state, record)
        return len(records)

    async def _forked(self, session_id: str, fork: Fork) -> SessionState:
        """The state a fork of ``fork.session_id`` at ``fork.seq`` starts from (read
        from that session's log and baselines: nothing is copied)."""
        if fork.session_id == session_id:
            raise InvalidInput(f"session {session_id!r} cannot be forked into itself")
        origin, _ = await self.load_at(fork.session_id, fork.seq)
        return forked(origin, session_id, fork)

    async def append(
        self,
        state: SessionState,
        commit: Commit,
        *,
        fence: int | None,
        claim: str | None = None,
    ) -> CommitReceipt:
        """Write ``commit`` as seq ``state.seq + 1``, then adopt it into ``state``.

        ``claim`` names the holder of a claim record (an empty commit raising the fence).
        """
        if self._settings.read_only:
            raise ReadOnlyStore("this store was opened read-only; it cannot commit")
        if fence is not None and fence < state.fence:
            raise FencedError(
                f"fence {fence} is older than fence {state.fence} already claimed on "
                f"session {state.session_id}; this lease holder must stop",
                session_id=state.session_id,
                fence=fence,
                current=state.fence,
            )
        check(state, commit, fenced=fence is not None)
        if commit.workspace is not None:
            await self._check_version(commit.workspace)
        if state.has_archive:
            await self._check_archive(state, commit)
        adopted = None if commit.fork is None else await self._forked(state.session_id, commit.fork)
        # The parts were validated when they were built; skip validating them again.
        record = CommitRecord.trusted(
            session_id=state.session_id,
            seq=state.seq + 1,
            commit_id=os.urandom(16).hex(),
            fence=max(state.fence, fence or 0),
            writer_fence=fence,
            claim=claim is not None,
            holder=claim,
            writer=self._settings.writer,
            commit=commit,
            committed_at=utcnow(),
        )
        data = encode(
            record,
            limit=self._settings.max_record_bytes,
            what=f"commit {record.seq} of session {state.session_id}",
        )
        if commit.workspace is not None:  # first: an applied version is never unindexed
            await self._versions.record(
                state.session_id,
                AppliedVersion(
                    session_id=state.session_id,
                    seq=record.seq,
                    commit_id=record.commit_id,
                    version=commit.workspace,
                    operations=commit.applied_operations,
                    committed_at=record.committed_at,
                ),
            )
        was_active = state.is_active
        becomes_active = active_after(state if adopted is None else adopted, commit)
        if becomes_active and not was_active:
            await self._index.mark(state.session_id)
        if record.seq == 1:
            await self._directory.record(state.session_id)
        await self._create(record, data)
        if adopted is not None:
            _become(state, adopted)
        apply(state, record)
        unquiet = fence is None and becomes_active and record.seq > 1  # a new one has no mark
        if was_active != becomes_active or unquiet:
            # The commit landed: the index catches up even if the writer is cancelled now
            # (a drive dropped when its lease was lost), or a finished session stays listed.
            await asyncio.shield(
                self._catch_up(state.session_id, record.seq, was_active, becomes_active, unquiet)
            )
        return CommitReceipt.trusted(
            session_id=record.session_id,
            seq=record.seq,
            fence=record.fence,
            committed_at=record.committed_at,
        )

    async def _catch_up(
        self, session_id: str, seq: int, was_active: bool, becomes_active: bool, unquiet: bool
    ) -> None:
        """The index after a commit that landed: its active marker, its quiet mark."""
        if was_active != becomes_active:
            await self._update_index(session_id, seq, becomes_active)
        if unquiet:
            await self._unquiet(session_id, seq)

    async def _update_index(self, session_id: str, seq: int, becomes_active: bool) -> None:
        # The commit has landed: its receipt must reach the writer whatever happens here.
        # A marker missed now is repaired by the next commit or resubmission, and
        # `store.sweep` / the reconciler's scan.
        try:
            if becomes_active:
                await self._index.mark(session_id)
            else:
                await self._index.sweep(session_id, finished_at_seq=seq)
        except BrainhandsError as error:
            log.warning(
                "session %s: commit %d landed but the active-session index was not "
                "updated (%s: %s); a later sweep repairs it",
                session_id,
                seq,
                error.code,
                error.message,
            )

    async def _unquiet(self, session_id: str, seq: int) -> None:
        """After an unfenced commit (from outside the lease holder: it may be news a quiet
        session waits for), take back its quiet mark; a failure is logged (the writer
        wakes the session anyway, and the audit's rotating look finds the rest)."""
        try:
            await self._index.unquiet(session_id)
        except BrainhandsError as error:
            log.warning(
                "session %s: commit %d landed but its quiet mark was not taken back (%s: %s)",
                session_id,
                seq,
                error.code,
                error.message,
            )

    async def _check_version(self, version: WorkspaceVersion) -> None:
        """A head is never a version whose manifest is not whole in the store (its files
        were checked when it was written: ``WorkspaceStore.put_version``)."""
        if not await self._workspaces.has_version(version):
            raise InvalidInput(
                f"workspace version {version.id}: its manifest is not in the store; "
                "record it (workspaces.put_version) before committing it",
                version=version.id,
            )

    async def _check_archive(self, state: SessionState, commit: Commit) -> None:
        """The checks of ``state.check`` for records that left the state."""
        sid, origin = state.session_id, state.origin
        for task in commit.tasks:
            if task.id not in state.tasks and await self._archive.task(sid, task.id, origin):
                if task.rev == 1:
                    raise AlreadyExists(f"task {task.id!r} already exists (archived)", key=task.id)
                raise InvalidTransition(f"task {task.id!r} is final and cannot change", key=task.id)
        for sub in commit.submissions:
            key = sub.request_id
            if key not in state.submissions and await self._archive.submission(sid, key, origin):
                if sub.rev == 1:
                    raise AlreadyExists(f"submission {key!r} already exists (archived)", key=key)
                raise InvalidTransition(f"submission {key!r} is final and cannot change", key=key)
        for operation_id in commit.applied_operations:
            if operation_id not in state.applied_operations and await self._archive.applied(
                sid, operation_id, origin
            ):
                raise AlreadyApplied(
                    f"operation {operation_id!r} was already applied to session {sid}; "
                    "results enter a session once",
                    operation_id=operation_id,
                )

    async def _create(self, record: CommitRecord, data: bytes) -> None:
        partition = layout.log_partition(record.session_id)
        item = layout.seq_item(record.seq)
        try:
            await self._backend.create(partition, item, data)
        except ItemExists:
            existing = await self._backend.get(partition, item)
            if existing is not None and _commit_id(existing, f"{partition}/{item}") == (
                record.commit_id
            ):
                return  # our own write, retried by the transport after a lost response
            raise ConflictError(
                f"session {record.session_id} already has commit {record.seq}: another "
                "writer got there first; reload the session and retry",
                session_id=record.session_id,
                seq=record.seq,
            ) from None


def _become(state: SessionState, adopted: SessionState) -> None:
    """Turn ``state`` (the caller's object) into ``adopted``."""
    for name in SessionState.model_fields:
        setattr(state, name, getattr(adopted, name))
    state.model_post_init(None)


def _commit_id(data: bytes, where: str) -> str:
    return decode(data, CommitRecord, where=where).commit_id
