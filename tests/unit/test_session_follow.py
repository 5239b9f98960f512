"""``SessionApiClient.follow`` across a dropped connection: a preview is sent before the
commit that saved it, so a drop between the two must resume after the last commit, not
after the preview (or that commit would never come); each failed connection is told to
``on_retry``."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

from bh.session_client import SessionApiClient, StreamItem
from contracts import BrainhandsError, StoreUnavailable
from session_api.views import CommitEvent, PreviewView


def commit(seq: int) -> CommitEvent:
    return CommitEvent.model_validate(
        {"session_id": "s1", "seq": seq, "committed_at": datetime.now(UTC), "fence": 1}
    )


class Dropping(SessionApiClient):
    """Connection 1: commit 4, then the preview of commit 5, then a drop. Later
    connections: every commit after the id asked for, up to 6."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:1", "token-0123456789abcdef")
        self.asked: list[int | None] = []

    async def events(
        self, session_id: str, *, last_event_id: int | None = None, entries: int | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        self.asked.append(last_event_id)
        if len(self.asked) == 1:
            yield commit(4)
            yield PreviewView(session_id="s1", seq=5, task_id="t", text="par")
            raise StoreUnavailable("the connection dropped")
        for seq in range((last_event_id or 0) + 1, 7):
            yield commit(seq)


async def test_a_drop_between_a_preview_and_its_commit_resumes_after_the_last_commit() -> None:
    client = Dropping()
    retries: list[tuple[int, Any]] = []
    seen: list[int] = []

    def heard(failures: int, error: BrainhandsError) -> None:
        retries.append((failures, error.code))

    async with aclosing(client.follow("s1", retry=0.01, on_retry=heard)) as items:
        async for item in items:
            if isinstance(item, CommitEvent):
                seen.append(item.seq)
                if item.seq == 6:
                    break
    assert client.asked == [None, 4], "resumed after commit 4, not after the preview"
    assert seen == [4, 5, 6], "commit 5 came, once"
    assert retries == [(1, "store_unavailable")]
