"""Cancel storms: bursts of cancellations, each sent three times, through the Session
API, against sessions with an operation running on the Hands and sessions just
submitted (their work queued), and the check that follows.

The contract: a cancelled task's operation either never ran, or its result records what
happened. So an operation whose effect the ledgers saw (the ``count`` ledger, the email
service's) must have a result that is not ``cancelled``, or be ``uncertain`` and left to
an operator; a stormed session ends (answered, failed or cancelled), never stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field

import httpx

from contracts.operation import OperationStatus
from session_store import SessionStore

#: sessions hit per storm: this many with a running operation, as many just submitted
PER_STORM = 2
REPEATS = 3


#: the storm's own sessions: long enough to be cancelled queued, and running
_LONG = {"task": {"kind": "steps", "input": {"n": 4, "seconds": 1.0}}}
#: how long a storm waits for its running session's first operation to be claimed
_RUNNING_WITHIN = 15.0
#: how long a storm submits its session again while the API is down
_ACCEPTED_WITHIN = 60.0


def request_of(session_id: str) -> str:
    """The one submission's request id of a chaos session (``s3``: ``r3``)."""
    return f"r{session_id[1:]}"


@dataclass
class CancelStorms:
    api: str
    token: str
    store: SessionStore
    #: session id -> what it was doing when the storm hit it, and the API's answers
    stormed: dict[str, str] = field(default_factory=dict)
    #: sessions the storms submitted themselves (``c0``, ``c1``...)
    own: list[str] = field(default_factory=list)
    #: storm sessions named so far (a name is never reused, accepted or not)
    _named: int = field(default=0, init=False)

    async def storm(self, submitted: int, rng: random.Random) -> str:
        """Submit two long sessions and cancel one at once (queued) and the other once
        an operation of it runs; cancel up to two of the run's sessions with an
        operation running right now; each cancel three times."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(headers=headers, timeout=10) as client:
            queued, running = f"c{self._named}", f"c{self._named + 1}"
            self._named += 2
            hit, said = [], []
            for session_id in (queued, running):
                # Owned once the API accepted it, not before: a storm cut short at the
                # end of a run must not leave a name the check then calls lost.
                if await self._submit(client, session_id):
                    self.own.append(session_id)
                else:
                    said.append(f"{session_id} (not accepted within {_ACCEPTED_WITHIN:.0f} s)")
            if queued in self.own:
                hit.append((queued, "queued"))
            if running in self.own:
                hit.append((running, await self._until_running(running)))
            hit += await self._running_now(submitted, rng)
            for session_id, doing in hit:
                answers = [await self._cancel(client, session_id) for _ in range(REPEATS)]
                self.stormed[session_id] = f"{doing}: {'/'.join(answers)}"
                said.append(f"{session_id} ({self.stormed[session_id]})")
        return ", ".join(said)

    async def _running_now(self, submitted: int, rng: random.Random) -> list[tuple[str, str]]:
        running = []
        for session_id in [f"s{n}" for n in range(submitted) if f"s{n}" not in self.stormed]:
            doing = await self._doing(session_id)
            if doing:
                running.append((session_id, doing))
        rng.shuffle(running)
        return running[:PER_STORM]

    async def _doing(self, session_id: str) -> str:
        for operation in await self.store.list_operations(session_id):
            if operation.status in (OperationStatus.ACCEPTED, OperationStatus.RUNNING):
                return f"running {operation.operation_id}"
        return ""

    async def _until_running(self, session_id: str) -> str:
        deadline = time.monotonic() + _RUNNING_WITHIN
        while time.monotonic() < deadline:
            doing = await self._doing(session_id)
            if doing:
                return doing
            await asyncio.sleep(0.1)
        return f"nothing running within {_RUNNING_WITHIN:.0f} s"

    async def _submit(self, client: httpx.AsyncClient, session_id: str) -> bool:
        """Whether the API accepted the session's submission."""
        url = f"{self.api}/v1/sessions/{session_id}/submissions"
        body = {"request_id": request_of(session_id), "input": _LONG}
        deadline = time.monotonic() + _ACCEPTED_WITHIN
        while time.monotonic() < deadline:  # the API may be down: the same request again
            with contextlib.suppress(httpx.HTTPError):
                if (await client.post(url, json=body)).status_code in (200, 201):
                    return True
            await asyncio.sleep(0.3)
        return False

    async def _cancel(self, client: httpx.AsyncClient, session_id: str) -> str:
        url = f"{self.api}/v1/sessions/{session_id}/cancel"
        body = {"request_id": request_of(session_id), "reason": "chaos: cancel storm"}
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
