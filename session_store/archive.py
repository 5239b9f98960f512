"""The archive: settled history moved out of the state that every load reads.

Writing a baseline moves into the archive what the session no longer needs in order to
run: the entries gathered since the previous baseline (one segment blob, listed by a
create-once segment record), and every settled task, settled submission and
applied-operation mark that no open work refers to (one create-once item each, keyed by
its id). Archived records are final, so writing one twice writes the same record; a
crash part-way leaves records that are also still in the log and in the previous
baseline, never a gap. The log itself is never shortened: like baselines, the archive
is derived data that makes loads cheap.

Reads go to the archive on demand: history (``entries``), a task or a submission by id,
whether an operation was applied. A segment blob that cannot be read (damaged, or never
uploaded by a writer that died right after creating its record) is not a loss: its
entries are read from the log instead, and the blob is written again. The store consults
the archive too before accepting a commit that creates a task or submission, or applies
an operation, that the state no longer holds (``CommitLog``), so ids stay unique and
results enter a session once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import Field

from contracts import (
    BlobRef,
    CommitRecord,
    CorruptRecord,
    Entry,
    NotFound,
    Origin,
    ReadOnlyStore,
    RecordError,
    Submission,
    Task,
)
from contracts.model import Frozen
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.blobs import BlobStore
from session_store.codec import decode, encode
from session_store.state import SessionState

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Frozen)


class SegmentBody(Frozen):
    """The JSON body of a segment blob: entries ``first`` … of one session (naming both
    makes the blob's digest unique to that session and range)."""

    v: Literal[1] = 1
    type: Literal["entries"] = "entries"
    session_id: str
    first: int
    entries: tuple[Entry, ...]


class SegmentRecord(Frozen):
    """Entries ``first`` .. ``first + count - 1`` of a session, kept in ``blob``."""

    v: Literal[1] = 1
    type: Literal["segment"] = "segment"
    first: int = Field(ge=0)
    count: int = Field(ge=1)
    blob: BlobRef


class ArchivedTask(Frozen):
    v: Literal[1] = 1
    type: Literal["archived_task"] = "archived_task"
    task: Task
    #: the seq of the baseline that archived it (a fork sees it when it is <= its fork
    #: point; records written before this field existed have None: counted as before)
    seq: int | None = None


class ArchivedSubmission(Frozen):
    v: Literal[1] = 1
    type: Literal["archived_submission"] = "archived_submission"
    submission: Submission
    seq: int | None = None


class AppliedMark(Frozen):
    v: Literal[1] = 1
    type: Literal["applied"] = "applied"
    operation_id: str
    seq: int | None = None


Stamped = TypeVar("Stamped", ArchivedTask, ArchivedSubmission, AppliedMark)


@dataclass
class Settled:
    """What one baseline moved into the archive."""

    entries_archived: int = 0
    tasks: list[str] = field(default_factory=list)
    submissions: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)


def settled_tasks(state: SessionState) -> list[Task]:
    """Terminal tasks that no open task refers to: not a child of an open task (whose
    handlers read their children) and not awaited by one."""
    open_tasks = [task for task in state.tasks.values() if not task.is_terminal]
    open_ids = {task.id for task in open_tasks}
    awaited = {t for task in open_tasks if task.wait is not None for t in task.wait.tasks}
    return [
        task
        for task in state.tasks.values()
        if task.is_terminal and task.parent_id not in open_ids and task.id not in awaited
    ]


class Archive:
    def __init__(self, backend: Backend, blobs: BlobStore) -> None:
        self._backend = backend
        self._blobs = blobs

    async def settle(self, snapshot: SessionState) -> Settled:
        """Move settled history out of ``snapshot`` (a private copy) into the archive."""
        sid, at = snapshot.session_id, snapshot.seq
        await self._archive_entries(snapshot)
        tasks = settled_tasks(snapshot)
        submissions = [s for s in snapshot.submissions.values() if s.status.is_final]
        applied = sorted(snapshot.applied_operations)
        writes = [
            *(
                self._keep(layout.archived_tasks_partition(sid), t.id, ArchivedTask(task=t, seq=at))
                for t in tasks
            ),
            *(
                self._keep(
                    layout.archived_submissions_partition(sid),
                    s.request_id,
                    ArchivedSubmission(submission=s, seq=at),
                )
                for s in submissions
            ),
            *(
                self._keep(layout.applied_partition(sid), op, AppliedMark(operation_id=op, seq=at))
                for op in applied
            ),
        ]
        await asyncio.gather(*writes)
        settled = Settled(
            entries_archived=snapshot.entries_archived,
            tasks=[t.id for t in tasks],
            submissions=[s.request_id for s in submissions],
            applied=applied,
        )
        forget(snapshot, settled)
        return settled

    async def task(
        self, session_id: str, task_id: str, origin: Origin | None = None
    ) -> Task | None:
        found = await self._lookup(
            layout.archived_tasks_partition, session_id, task_id, ArchivedTask, origin
        )
        return None if found is None else found.task

    async def submission(
        self, session_id: str, request_id: str, origin: Origin | None = None
    ) -> Submission | None:
        found = await self._lookup(
            layout.archived_submissions_partition,
            session_id,
            request_id,
            ArchivedSubmission,
            origin,
        )
        return None if found is None else found.submission

    async def applied(
        self, session_id: str, operation_id: str, origin: Origin | None = None
    ) -> bool:
        found = await self._lookup(
            layout.applied_partition, session_id, operation_id, AppliedMark, origin
        )
        return found is not None

    async def _lookup(
        self,
        partition: Callable[[str], str],
        session_id: str,
        item: str,
        model: type[Stamped],
        origin: Origin | None,
    ) -> Stamped | None:
        """The session's own archived record, else the one a session it was forked from
        had archived by the fork point (a later one is not part of this history)."""
        found = await self._read(partition(session_id), item, model)
        for source in [] if origin is None else origin.lineage():
            if found is not None:
                break
            earlier = await self._read(partition(source.session_id), item, model)
            if earlier is not None and (earlier.seq is None or earlier.seq <= source.seq):
                found = earlier
        return found

    async def entries(
        self,
        session_id: str,
        start: int,
        stop: int,
        *,
        archived: int,
        origin: Origin | None = None,
    ) -> list[Entry]:
        """Entries ``start`` .. ``stop - 1`` of the first ``archived`` (those a state's
        baselines moved here; ``stop <= archived``). A fork's first
        ``origin.entries_archived`` entries are read from the session it was forked from."""
        found: list[Entry] = []
        covered = 0 if origin is None else origin.entries_archived
        if origin is not None and start < covered:
            found = await self.entries(
                origin.session_id,
                start,
                min(stop, covered),
                archived=covered,
                origin=origin.origin,
            )
        for segment in await self._segments(session_id) if stop > covered else []:
            end = segment.first + segment.count
            if covered >= stop or segment.first != covered or end > archived:
                break  # done, or beyond what this state archived (a crashed writer's)
            covered = end
            if end > start:
                entries = await self._segment_entries(session_id, segment, forked=bool(origin))
                found.extend(entries[max(0, start - segment.first) : stop - segment.first])
        if covered < stop:
            raise CorruptRecord(
                f"session {session_id}: archived entries {covered}..{stop - 1} have no "
                f"segment in {layout.segment_partition(session_id)}",
                session_id=session_id,
            )
        return found

    async def _segment_entries(
        self, session_id: str, segment: SegmentRecord, *, forked: bool = False
    ) -> tuple[Entry, ...]:
        try:
            data = await self._blobs.get(segment.blob)
            return decode(data, SegmentBody, where=f"blob {segment.blob.digest}").entries
        except (NotFound, RecordError) as error:
            if forked:  # its early entries are in another session's log: no repair here
                raise CorruptRecord(
                    f"session {session_id}: segment {segment.first}+{segment.count} is "
                    f"unreadable ({error.message}) and a fork's segments are not repaired "
                    "from its log",
                    session_id=session_id,
                ) from None
            log.warning(
                "session %s: segment %d+%d unreadable (%s); reading its entries from the log",
                session_id,
                segment.first,
                segment.count,
                error.message,
            )
        entries = await self._from_log(session_id, segment.first, segment.first + segment.count)
        body = SegmentBody(session_id=session_id, first=segment.first, entries=entries)
        with contextlib.suppress(ReadOnlyStore):  # the same entries give the same blob
            await self._blobs.put(encode(body), "application/json")
        return entries

    async def _from_log(self, session_id: str, start: int, stop: int) -> tuple[Entry, ...]:
        """Entries ``start`` .. ``stop - 1`` as the log recorded them (the slow way)."""
        partition = layout.log_partition(session_id)
        found: list[Entry] = []
        seen, after = 0, None
        while seen < stop:
            page = await self._backend.items(partition, after=after, limit=256)
            if not page:
                break
            for item, data in page:
                entries = decode(data, CommitRecord, where=f"{partition}/{item}").commit.entries
                found.extend(entries[max(0, start - seen) : max(0, stop - seen)])
                seen += len(entries)
            after = page[-1][0]
        if len(found) != stop - start:
            raise CorruptRecord(
                f"session {session_id}: the log holds {seen} entries, not {stop}",
                session_id=session_id,
            )
        return tuple(found)

    async def _segments(self, session_id: str) -> list[SegmentRecord]:
        partition = layout.segment_partition(session_id)
        return [
            decode(data, SegmentRecord, where=f"{partition}/{item}")
            for item, data in await self._backend.items(partition)
        ]

    async def _archive_entries(self, snapshot: SessionState) -> None:
        """Archive the entry tail as segments, reusing segments an earlier (possibly
        crashed) baseline writer already created for the same range."""
        first, tail, walk = await self._past_others(snapshot)
        while walk and tail:
            item = layout.seq_item(first)
            segment = await self._segment(snapshot, item, first, tail)
            if segment.count > len(tail):
                break  # a writer that had seen more archived it: keep ours live
            first, tail = first + segment.count, tail[segment.count :]
        snapshot.entries_archived, snapshot.entries_tail = first, list(tail)

    async def _past_others(self, snapshot: SessionState) -> tuple[int, list[Entry], bool]:
        """Where this writer's archiving starts: past the segments other writers created
        since its ``entries_archived`` moved (only its own baselines move it), found in
        one listing and one read instead of a failed create and a read per segment.

        Segments are contiguous — each starts where one ends, at a writer's
        ``entries_archived`` — so every entry below the newest segment's start is
        archived. That start is a boundary only when it lies within this snapshot; a
        newest segment beyond it leaves the walk as it was (it stops at a segment longer
        than the tail, keeping the rest live). The flag: whether to walk on."""
        first, tail = snapshot.entries_archived, snapshot.entries_tail
        partition = layout.segment_partition(snapshot.session_id)
        later = await self._backend.keys(partition, after=layout.seq_item(first)) if tail else []
        if not later:
            return first, tail, True
        newest = await self._read(partition, later[-1], SegmentRecord)
        if newest is None or not first < newest.first <= first + len(tail):
            return first, tail, True
        tail = tail[newest.first - first :]
        if newest.count > len(tail):  # a writer that had seen more archived it: ours live
            return newest.first, tail, False
        return newest.first + newest.count, tail[newest.count :], True

    async def _segment(
        self, snapshot: SessionState, item: str, first: int, tail: list[Entry]
    ) -> SegmentRecord:
        """The segment starting at ``first``: ours, holding the whole tail, or the one an
        earlier (possibly crashed) or concurrent writer created for that range.

        The record is created before its blob is uploaded: a writer that dies in
        between leaves a record whose blob is missing, which readers repair from the log
        (``_segment_entries``), and never a blob that nothing refers to.
        """
        sid = snapshot.session_id
        partition = layout.segment_partition(sid)
        data = encode(SegmentBody(session_id=sid, first=first, entries=tuple(tail)))
        segment = SegmentRecord(
            first=first, count=len(tail), blob=self._blobs.ref_of(data, "application/json")
        )
        try:
            await self._backend.create(partition, item, encode(segment))
        except ItemExists:
            existing = await self._backend.get(partition, item)
            assert existing is not None, "segment records are never deleted"
            return decode(existing, SegmentRecord, where=f"{partition}/{item}")
        await self._blobs.put(data, "application/json")
        return segment

    async def _keep(self, partition: str, item: str, record: Frozen) -> None:
        with contextlib.suppress(ItemExists):  # archived before: the same final record
            await self._backend.create(partition, item, encode(record))

    async def _read(self, partition: str, item: str, model: type[R]) -> R | None:
        data = await self._backend.get(partition, item)
        return None if data is None else decode(data, model, where=f"{partition}/{item}")


def forget(state: SessionState, settled: Settled) -> None:
    """Drop what ``settled`` moved to the archive from ``state``'s memory.

    Archived tasks and submissions are final, so nothing newer can have replaced them.
    """
    archived = settled.entries_archived - state.entries_archived
    if archived > 0:
        state.entries_tail = state.entries_tail[archived:]
        state.entries_archived = settled.entries_archived
    for task_id in settled.tasks:
        if state.tasks.pop(task_id, None) is not None:
            state.archived_tasks += 1
    for request_id in settled.submissions:
        if state.submissions.pop(request_id, None) is not None:
            state.archived_submissions += 1
    for operation_id in settled.applied:
        if operation_id in state.applied_operations:
            state.applied_operations.discard(operation_id)
            state.archived_applied += 1
