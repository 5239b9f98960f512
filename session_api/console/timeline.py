"""A session's commits as timeline rows: when, by whom, under which fence, and what each
commit did — a claim by another process than the one that wrote the session's last
fenced commit (another Brain took the session: a crash, a kill or a lost lease) is
marked as a takeover."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from contracts.commit import CommitRecord


@dataclass(frozen=True)
class TimelineRow:
    seq: int
    at: datetime
    writer: str
    holder: str | None
    fence: int
    writer_fence: int | None
    claim: bool
    takeover: bool
    what: str


def timeline(
    records: Sequence[CommitRecord], before: Sequence[CommitRecord] = ()
) -> list[TimelineRow]:
    """Rows of ``records`` (in seq order); ``before``: the commits just before them, to
    know who wrote the last fenced one (the unfenced ones are the API's ingress)."""
    writer = None
    for record in before:
        if record.writer_fence is not None:
            writer = record.writer
    rows = []
    for record in records:
        takeover = record.claim and writer is not None and record.writer != writer
        if record.writer_fence is not None:
            writer = record.writer
        rows.append(
            TimelineRow(
                seq=record.seq,
                at=record.committed_at,
                writer=record.writer,
                holder=record.holder,
                fence=record.fence,
                writer_fence=record.writer_fence,
                claim=record.claim,
                takeover=takeover,
                what=describe(record),
            )
        )
    return rows


def describe(record: CommitRecord) -> str:
    """What a commit holds, in a few words."""
    commit = record.commit
    parts: list[str] = []
    if record.claim:
        parts.append(f"claim of fence {record.fence} by {record.holder}")
    if commit.fork is not None:
        parts.append(f"fork of {commit.fork.session_id} at commit {commit.fork.seq}")
    for submission in commit.submissions:
        parts.append(f"submission {submission.request_id} {submission.status.value}")
    for task in commit.tasks:
        state = task.outcome.value if task.outcome else task.status.value
        parts.append(f"task {task.id} {state} ({task.phase})")
    parts += [f"intent {intent.operation_id} ({intent.dispatch.tool})" for intent in commit.intents]
    parts += [f"applied {operation_id}" for operation_id in commit.applied_operations]
    if commit.entries:
        kinds = sorted({entry.kind.value for entry in commit.entries})
        parts.append(f"{len(commit.entries)} entries ({', '.join(kinds)})")
    if commit.documents:
        parts.append("documents " + ", ".join(sorted({d.name for d in commit.documents})))
    if commit.outbox_done:
        parts.append(f"{len(commit.outbox_done)} outbox sent")
    return "; ".join(parts) or "(empty)"
