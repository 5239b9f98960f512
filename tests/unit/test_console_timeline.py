"""The console's timeline marks a takeover — a claim by another process than the one
that wrote the last fenced commit — even when the previous holder's own claim is on an
earlier page (a Brain killed right after its first drive)."""

from __future__ import annotations

from contracts import Commit, CommitRecord, utcnow
from session_api.console.timeline import timeline


def record(seq: int, writer: str, *, fence: int | None, claim: bool = False) -> CommitRecord:
    return CommitRecord(
        session_id="five",
        seq=seq,
        commit_id=f"c{seq}",
        fence=fence or 0,
        writer_fence=fence,
        claim=claim,
        holder=writer if claim else None,
        writer=writer,
        commit=Commit(),
        committed_at=utcnow(),
    )


def test_a_claim_by_another_process_is_a_takeover_across_pages() -> None:
    ingress = record(1, "api", fence=None)
    first = [record(2, "brain-a", fence=1, claim=True), record(3, "brain-a", fence=1)]
    page = [
        record(4, "api", fence=None),  # the Session API's input between the drives
        record(5, "brain-a", fence=1),
        record(6, "brain-b", fence=2, claim=True),  # brain-a was killed
        record(7, "brain-b", fence=2),
        record(8, "brain-b", fence=3, claim=True),  # the same Brain's next drive
    ]
    rows = {row.seq: row for row in timeline(page, [ingress, *first])}
    assert [seq for seq, row in rows.items() if row.takeover] == [6]
    alone = {row.seq: row for row in timeline(page[2:], [])}  # nothing known before
    assert not any(row.takeover for row in alone.values())
    assert rows[6].what.startswith("claim of fence 2 by brain-b")
