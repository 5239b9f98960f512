"""Committing a dispatch's intent the way a Brain does, for tests that drive the Hands
directly (the Hands run only what a session's log holds)."""

from __future__ import annotations

from contracts import Commit, Intent
from contracts.tool import Dispatch
from hands.executor import Executor
from session_store import SessionStore


async def commit_intent(store: SessionStore, *dispatches: Dispatch) -> None:
    """Claim each dispatch's session with the next fence and commit the intents."""
    by_session: dict[str, list[Dispatch]] = {}
    for dispatch in dispatches:
        by_session.setdefault(dispatch.session_id, []).append(dispatch)
    for session_id, calls in by_session.items():
        handle = await store.session(session_id)
        fence = handle.fence + 1
        await handle.claim(fence, holder="test-brain")
        await handle.commit(Commit(intents=tuple(Intent.of(d) for d in calls)), fence=fence)


class CommittingExecutor(Executor):
    """An executor for tests that play the Brain too: each dispatch's intent is committed
    to its session first (as a Brain's drive does), then checked as always."""

    async def _committed(self, dispatch: Dispatch) -> Dispatch:
        if await self.store.intent(dispatch.session_id, dispatch.operation_id) is None:
            await commit_intent(self.store, dispatch)
        return await super()._committed(dispatch)
