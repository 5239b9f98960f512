"""Cancel storms: bursts of cancellations, each sent three times, through the Session
API, against sessions with an operation running on the Hands and sessions just
submitted (their work queued), and the check that follows.

The contract: a cancelled task's operation either never ran, or its result records what
happened. So an operation whose effect the ledgers saw (the ``count`` ledger, the email
service's) must have a result that is not ``cancelled``, or be ``uncertain`` and left to
an operator; a stormed session ends (answered, failed or cancelled), never stuck.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import httpx

from contracts.operation import OperationStatus
from session_store import SessionStore

#: sessions hit per storm: this many with a running operation, as many just submitted
PER_STORM = 2
REPEATS = 3


@dataclass
class CancelStorms:
    api: str
    token: str
    store: SessionStore
    #: session id -> what it was doing when the storm hit it, and the API's answers
    stormed: dict[str, str] = field(default_factory=dict)

    async def storm(self, submitted: int, rng: random.Random) -> str:
        sessions = [f"s{n}" for n in range(submitted) if f"s{n}" not in self.stormed]
        running: list[tuple[str, str]] = []
        for session_id in sessions:
            for operation in await self.store.list_operations(session_id):
                if operation.status in (OperationStatus.ACCEPTED, OperationStatus.RUNNING):
                    running.append((session_id, f"running {operation.operation_id}"))
                    break
        rng.shuffle(running)
        hit = running[:PER_STORM]
        taken = {session_id for session_id, _ in hit}
        queued = [s for s in reversed(sessions) if s not in taken][:PER_STORM]
        hit += [(session_id, "just submitted") for session_id in queued]
        headers = {"Authorization": f"Bearer {self.token}"}
        said = []
        async with httpx.AsyncClient(headers=headers, timeout=10) as client:
            for session_id, doing in hit:
                answers = [await self._cancel(client, session_id) for _ in range(REPEATS)]
                self.stormed[session_id] = f"{doing}: {'/'.join(answers)}"
                said.append(f"{session_id} ({self.stormed[session_id]})")
        return ", ".join(said) or "nothing to cancel"

    async def _cancel(self, client: httpx.AsyncClient, session_id: str) -> str:
        url = f"{self.api}/v1/sessions/{session_id}/cancel"
        body = {"request_id": f"r{session_id[1:]}", "reason": "chaos: cancel storm"}
        try:
            return str((await client.post(url, json=body)).status_code)
        except httpx.HTTPError as error:  # the API may be down right now: part of the game
            return type(error).__name__

    async def check(self, executed: set[str]) -> tuple[list[str], set[str]]:
        """Violations, and the executed operations of stormed sessions whose result
        records their effect (not applied, when their task was cancelled first)."""
        found, recorded = [], set()
        for session_id in self.stormed:
            for operation in await self.store.list_operations(session_id):
                op = operation.operation_id
                if op not in executed:
                    continue
                result = await self.store.get_operation_result(op)
                error = result.error.code if result is not None and result.error else ""
                if result is not None and "cancelled" in (result.termination, error):
                    found.append(f"cancelled though its effect happened: {session_id}/{op}")
                elif result is not None or operation.status == OperationStatus.UNCERTAIN:
                    recorded.add(op)
                else:
                    found.append(f"ran, and no result records it: {session_id}/{op}")
        return found, recorded
