"""Deferred previews (``brain.progress``): a preview is written again only when what a
reader sees of it changed."""

from __future__ import annotations

from brain.builder import CommitBuilder
from brain.progress import Progress, ProgressSettings
from contracts import PROGRESS_DOCUMENT, DocumentPatch, utcnow
from session_store import SessionState


def written(progress: Progress) -> dict[str, object] | None:
    """What a deferred commit built now would write of task t's preview (and mark it
    written), or None when it would write nothing."""
    if not progress.has_news:
        return None
    builder = CommitBuilder(SessionState(session_id="s1"), utcnow())
    progress.fold(builder)
    progress.written()
    (write,) = builder.build().documents
    assert isinstance(write, DocumentPatch) and write.name == PROGRESS_DOCUMENT
    member = write.patch["t"]
    assert isinstance(member, dict)
    return member


def test_a_capped_preview_is_written_once_more_when_cut_and_then_not_again() -> None:
    progress = Progress(ProgressSettings(max_chars=10))
    progress.note("t", "a1", "12345678")
    assert _shown(written(progress)) == ("12345678", False)
    progress.note("t", "a1", "90ab")  # crosses the cap: the text and "truncated" change
    assert _shown(written(progress)) == ("1234567890", True)
    for _ in range(20):  # nothing a reader sees changes any more
        progress.note("t", "a1", "more text")
    assert written(progress) is None
    progress.note("t", "a2", "x")  # a new request starts a new preview
    assert _shown(written(progress)) == ("x", False)


def test_an_empty_piece_changes_nothing() -> None:
    progress = Progress(ProgressSettings(max_chars=10))
    progress.note("t", "a1", "abc")
    assert written(progress) is not None
    progress.note("t", "a1", "")
    assert written(progress) is None


def _shown(member: dict[str, object] | None) -> tuple[object, object]:
    assert member is not None
    return member["text"], member["truncated"]
