"""The chaos run's ``limit_burst``: limits under concurrent callers (invariant 20).

Two bursts at once, while the run's other faults go on:

- **A session budget.** A session of its own (``b0``, ``b1``…) gets a budget of one
  token (``fail`` when reached) and ``AGENTS`` agent messages in as many conversations at
  the same moment: their first model calls are concurrent. A budget admits the one call
  that goes past it and no other, whatever the concurrency, so the session's usage must
  count one call at most; every message fails with ``budget_exceeded`` (as designed) or
  is answered. (Before the fix: each of the agents checked the usage committed so far,
  and every one made its call.)
- **A shared token-per-minute limit.** ``CALLERS`` callers ask the run's Redis, at once,
  to admit a call of ``ESTIMATE`` tokens under a limit of ``TPM`` per window (a limiter
  of the burst's own, so the run's model calls keep theirs): at most one call may go
  past the limit, so at most ``TPM // ESTIMATE + 1`` are admitted. (Before: all were.)

``check`` turns what each burst found into violations.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import httpx

from bh.chaos_clients import redis_client
from coordination.ratelimit import ModelLimits
from session_store import SessionStore
from session_store.usage import usage_of

#: agent messages a budget burst submits at once, each in a conversation of its own
AGENTS = 4
#: the concurrent callers of a TPM burst, what each asks for, and the limit
CALLERS, ESTIMATE, TPM = 20, 900, 1_000


@dataclass
class LimitBursts:
    api: str
    token: str
    redis_url: str
    namespace: str
    #: the budget bursts' sessions (``b0``…), submitted
    own: list[str] = field(default_factory=list)
    #: each TPM burst: how many of ``CALLERS`` were admitted
    admitted: list[int] = field(default_factory=list)

    async def burst(self) -> str:
        session, admitted = await asyncio.gather(self._budget(), self._tokens())
        return f"{session}: {AGENTS} agents on a 1-token budget; TPM: {admitted} of {CALLERS}"

    async def _budget(self) -> str:
        session_id = f"b{len(self.own)}"
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.api, headers=headers, timeout=10) as http:
            budget = {"budget": {"tokens": 1, "on_exceed": "fail"}}
            await _until_accepted(
                lambda: http.put(f"/v1/sessions/{session_id}/budget", json=budget)
            )
            url = f"/v1/sessions/{session_id}/submissions"
            await asyncio.gather(
                *(_until_accepted(partial(http.post, url, json=_message(n))) for n in range(AGENTS))
            )
        self.own.append(session_id)
        return session_id

    async def _tokens(self) -> int:
        client = redis_client(self.redis_url)
        try:
            limits = ModelLimits(
                client,
                f"burst-{uuid.uuid4().hex[:8]}",
                tokens_per_minute=TPM,
                prefix=self.namespace,
            )
            answers = await asyncio.gather(*(limits.admit(ESTIMATE) for _ in range(CALLERS)))
        finally:
            await client.aclose()
        admitted = sum(answer.admitted for answer in answers)
        self.admitted.append(admitted)
        return admitted

    def requests(self, session_id: str) -> list[str]:
        return [f"q{n}" for n in range(AGENTS)] if session_id in self.own else []

    async def check(self, store: SessionStore) -> list[str]:
        """Violations: a budget session whose calls went more than one past its budget,
        a TPM burst that admitted more than one call past the limit."""
        found = []
        for session_id in self.own:
            calls = usage_of((await store.session(session_id)).state).total.calls
            if calls > 1:
                found.append(
                    f"budget overrun: {session_id} made {calls} model calls on a 1-token budget"
                )
        most = TPM // ESTIMATE + 1
        found += [
            f"TPM overrun: {n} of {CALLERS} concurrent calls of {ESTIMATE} admitted under "
            f"{TPM} (at most {most})"
            for n in self.admitted
            if n > most
        ]
        return found


def _message(n: int) -> dict[str, object]:
    return {
        "request_id": f"q{n}",
        "conversation_id": f"c{n}",
        "input": {"text": "Count, then notify all five."},
    }


async def _until_accepted(send: Callable[[], Awaitable[httpx.Response]]) -> None:
    """Send until the API takes it (it may be down a moment: a restart fault); the same
    request again is safe (a budget is set, a submission is keyed by request id)."""
    for _ in range(100):
        with contextlib.suppress(httpx.HTTPError):
            if (await send()).status_code < 300:
                return
        await asyncio.sleep(0.3)
    raise RuntimeError("the Session API did not take a burst's request in 30 s")
