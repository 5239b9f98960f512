"""Routing wakes to Brains that can run the session (invariant 10).

A Brain advertises what it runs — its registry's ``compatibility()``, e.g. ``agent@1``,
``send-batch@1`` — under a route id (a hash of that set) and consumes the wake queue of
that route. ``SessionRouter`` looks at a session's open work (the kind@version of every
open task, and of the root task a pending submission will create) and picks a live
route that covers all of it. When none does, the session is reported blocked, with the
reason, in its control document (where the Session API shows it) and no wake is
queued; the reconciler asks again, so it runs as soon as a compatible Brain starts.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable

from redis.asyncio import Redis

from contracts import CONTROL_DOCUMENT, StoreUnavailable, SubmissionStatus, TaskInput
from session_store import SessionState, SessionStore
from session_store.intake import read_input
from session_store.submissions import SessionClient

#: A Brain's advertisement lives this long unless renewed.
ADVERTISEMENT_S = 15.0


def route_of(compatibility: Iterable[str]) -> str:
    """The route id of a set of kind@version keys (the same set, the same id)."""
    keys = sorted(set(compatibility))
    return "r" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]


class Routes:
    """The live advertisements: route id → the kind@version keys its Brains run."""

    def __init__(self, client: Redis, *, prefix: str = "bh") -> None:
        self._redis = client
        self._key = f"{prefix}:routes"

    async def advertise(self, compatibility: Iterable[str]) -> str:
        keys = sorted(set(compatibility))
        route = route_of(keys)
        value = json.dumps({"kinds": keys, "until": time.time() + ADVERTISEMENT_S})
        try:
            await self._redis.hset(self._key, route, value)
        except OSError as error:
            raise StoreUnavailable(f"cannot advertise route {route}: {error}") from None
        return route

    async def live(self) -> dict[str, frozenset[str]]:
        try:
            found = await self._redis.hgetall(self._key)
        except OSError as error:
            raise StoreUnavailable(f"cannot read the routes: {error}") from None
        now, routes = time.time(), {}
        for route, raw in found.items():
            data = json.loads(raw)
            if data.get("until", 0) > now:
                name = route.decode() if isinstance(route, bytes) else str(route)
                routes[name] = frozenset(data.get("kinds", ()))
        return routes


class SessionRouter:
    """Which route may take a wake of a session; None (and a report) when none can."""

    def __init__(self, store: SessionStore, routes: Routes, *, text_kind: str = "agent@1") -> None:
        self._store = store
        self._routes = routes
        self._text_kind = text_kind
        self._client = SessionClient(store)

    async def __call__(self, session_id: str) -> str | None:
        state = (await self._store.session(session_id)).state
        needed = self.needed(state)
        live = await self._routes.live()
        wanted = frozenset(needed.values())
        fitting = sorted(route for route, kinds in live.items() if wanted <= kinds)
        if fitting:
            if _reported(state):
                await self._client.report_blocked(session_id, None)
            return fitting[0]
        runs = ", ".join(sorted({key for kinds in live.values() for key in kinds})) or "nothing"
        served = set().union(*live.values()) if live else set()
        reasons = {
            what: f"no running Brain runs {key} (running Brains run: {runs})"
            for what, key in needed.items()
            if key not in served
        } or {"session": f"no single running Brain runs all of {', '.join(sorted(wanted))}"}
        if _reported(state) != reasons:  # said once, not again on every wake
            await self._client.report_blocked(session_id, reasons)
        return None

    def needed(self, state: SessionState) -> dict[str, str]:
        """What must be runnable: open task id → kind@version, and for a submission not
        yet turned into a task, ``submission <request_id>`` → its root task's kind."""
        needed = {
            task.id: f"{task.kind}@{task.version}"
            for task in state.tasks.values()
            if not task.is_terminal
        }
        for submission in state.submissions.values():
            if submission.status is not SubmissionStatus.ACCEPTED:
                continue
            given = read_input(submission.input)
            key = (
                f"{given.task.kind}@{given.task.version}"
                if isinstance(given, TaskInput)
                else self._text_kind
            )
            needed[f"submission {submission.request_id}"] = key
        return needed


def _reported(state: SessionState) -> object:
    """What the control document says is blocked (None or empty: nothing)."""
    control = state.documents.get(CONTROL_DOCUMENT)
    return control.body.get("blocked") if control and isinstance(control.body, dict) else None
