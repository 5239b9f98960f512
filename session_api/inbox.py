"""``GET /v1/questions``: the open questions (and approvals) of the active sessions a
token covers — an approver's inbox, optionally of one queue.

It reads at most ``limit`` sessions of the active index (as listing sessions does); a
restricted token scans more of the index to find its own.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query

from contracts import BrainhandsError, InvalidInput
from session_api.context import ApiContext
from session_api.describe import open_questions
from session_api.listing import LOADS, SCAN_FACTOR
from session_api.sessions import LimitParam, Reader
from session_api.views import Inbox, InboxItem
from session_store import SessionStore
from webapi.auth import Grant

QueueParam = Annotated[str | None, Query(max_length=200, description="Only this queue.")]


def inbox_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/questions", tags=["questions"])

    @router.get("")
    async def questions(grant: Reader, queue: QueueParam = None, limit: LimitParam = None) -> Inbox:
        """Open questions of the active sessions the token covers, oldest first; answer
        each with ``POST /v1/sessions/{id}/inputs``."""
        bound = context.list_limit
        if limit is not None and limit > bound:
            raise InvalidInput(f"limit {limit} is above this API's bound {bound}", field="limit")
        return await inbox(context.store, limit or bound, grant, queue)

    return router


async def inbox(store: SessionStore, limit: int, grant: Grant, queue: str | None) -> Inbox:
    scan = limit * SCAN_FACTOR if grant.restricted else limit
    scanned, complete = await store.some_active_sessions(scan)
    covered = [session_id for session_id in scanned if grant.covers(session_id)]
    loads = asyncio.Semaphore(LOADS)

    async def asked(session_id: str) -> list[InboxItem]:
        async with loads:
            try:
                handle = await store.session(session_id)
            except BrainhandsError:  # one bad session must not hide the others
                return []
        return [
            InboxItem(session_id=session_id, task_id=open_.task_id, question=open_.question)
            for open_ in open_questions(handle.state)
            if queue is None or open_.question.queue == queue
        ]

    found = await asyncio.gather(*(asked(session_id) for session_id in covered[:limit]))
    items = sorted((item for some in found for item in some), key=lambda i: i.question.asked_at)
    return Inbox(questions=items, truncated=not complete or len(covered) > limit)
