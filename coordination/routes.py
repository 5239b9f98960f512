"""Routing wakes to Brains that can run the session (invariant 10).

A Brain advertises what it runs — its registry's ``compatibility()``, e.g. ``agent@1``,
``send-batch@1`` — under a route id (a hash of that set) and consumes the wake queue of
that route. ``SessionRouter`` looks at a session's open work (the kind@version of every
open task, and of the root task a pending submission will create) and picks a live
route that covers all of it. When none does, the session is reported blocked, with the
reason, in its control document (where the Session API shows it) and no wake is
queued; the reconciler asks again, so it runs as soon as a compatible Brain starts.

An advertisement lives until a moment on Redis's clock (``TIME`` inside the script that
writes it), and is live while Redis's clock, read in the same round trip as the
advertisements, is before it: no host's clock is compared with another's (invariant 17),
so a Brain whose clock is behind is still seen, and a dead one's route lapses on time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts import AnswerInput, StoreUnavailable, SubmissionStatus, TaskInput, TextInput
from session_store import SessionState, SessionStore
from session_store.intake import read_input
from session_store.submissions import SessionClient, blocked_reasons

#: A Brain's advertisement lives this long unless renewed.
ADVERTISEMENT_S = 15.0
#: What a Brain with any model offers; a task that needs a model but names none needs it.
ANY_MODEL = "model:any"


def model_offers(model: str | None) -> tuple[str, ...]:
    """What a Brain whose model configuration is ``model`` offers besides its kinds."""
    return (ANY_MODEL, f"model:{model}") if model else ()


# KEYS: the routes hash. ARGV: route id, its keys (a JSON list), lifetime (seconds). The
# advertisement lives until Redis's clock plus the lifetime (seconds, as ``until``).
_ADVERTISE = """
pcall(redis.replicate_commands)
local t = redis.call('TIME')
local untl = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1],
  '{"kinds": ' .. ARGV[2] .. ', "until": ' .. string.format('%.3f', untl) .. '}')
"""


def route_of(compatibility: Iterable[str]) -> str:
    """The route id of a set of kind@version keys (the same set, the same id)."""
    keys = sorted(set(compatibility))
    return "r" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]


class Routes:
    """The live advertisements: route id → the kind@version keys its Brains run."""

    def __init__(
        self, client: Redis, *, prefix: str = "bh", lifetime: float = ADVERTISEMENT_S
    ) -> None:
        self._redis = client
        self._key = f"{prefix}:routes"
        self._advertise = client.register_script(_ADVERTISE)
        #: how long an advertisement lives unless renewed (advertisers renew at a third)
        self.lifetime = lifetime

    async def advertise(self, compatibility: Iterable[str]) -> str:
        keys = sorted(set(compatibility))
        route = route_of(keys)
        try:
            await self._advertise(keys=[self._key], args=[route, json.dumps(keys), self.lifetime])
        except (RedisError, OSError) as error:
            raise StoreUnavailable(f"cannot advertise route {route}: {error}") from None
        return route

    async def live(self) -> dict[str, frozenset[str]]:
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.time()
                pipe.hgetall(self._key)
                (seconds, micros), found = await pipe.execute()
        except (RedisError, OSError) as error:
            raise StoreUnavailable(f"cannot read the routes: {error}") from None
        return live_at(found, seconds + micros / 1e6)


def live_at(advertised: Mapping[bytes | str, bytes | str], now: float) -> dict[str, frozenset[str]]:
    """The advertisements of the routes hash that live at ``now`` (Redis's clock,
    seconds): route id → its keys. A malformed one advertises nothing."""
    routes = {}
    for route, raw in advertised.items():
        try:
            data = json.loads(raw)
            until, kinds = float(data.get("until", 0)), frozenset(data.get("kinds", ()))
        except (ValueError, TypeError, AttributeError):
            continue
        if until > now:
            routes[route.decode() if isinstance(route, bytes) else str(route)] = kinds
    return routes


class SessionRouter:
    """Which route may take a wake of a session; None (and a report) when none can."""

    def __init__(
        self,
        store: SessionStore,
        routes: Routes,
        *,
        text_kind: str = "agent@1",
        model_kinds: frozenset[str] = frozenset({"agent"}),
    ) -> None:
        """``model_kinds``: task kinds that call the model, so need a Brain with one (the
        model their input names, if it names one)."""
        self._store = store
        self._routes = routes
        self._text_kind = text_kind
        self._model_kinds = model_kinds
        self._client = SessionClient(store)

    async def __call__(self, session_id: str) -> str | None:
        state = (await self._store.session(session_id)).state
        needed = self.needed(state)
        live = await self._routes.live()
        wanted = frozenset(needed.values())
        fitting = sorted(route for route, kinds in live.items() if wanted <= kinds)
        if fitting:
            if blocked_reasons(state):
                await self._client.report_blocked(session_id, None)
            return fitting[0]
        if not needed:  # no open work (an outbox to relay at most): nothing is blocked
            return None
        runs = ", ".join(sorted({key for kinds in live.values() for key in kinds})) or "nothing"
        served = set().union(*live.values()) if live else set()
        reasons = {
            what: f"no running Brain runs {key} (running Brains run: {runs})"
            for what, key in needed.items()
            if key not in served
        } or {"session": f"no single running Brain runs all of {', '.join(sorted(wanted))}"}
        if blocked_reasons(state) != reasons:  # said once, not again on every wake
            await self._client.report_blocked(session_id, reasons)
        return None

    def needed(self, state: SessionState) -> dict[str, str]:
        """What must be runnable: open task id → kind@version, and for a submission not
        yet turned into a task, ``submission <request_id>`` → its root task's kind."""
        needed = {}
        for task in state.tasks.values():
            if task.is_terminal:
                continue
            needed[task.id] = f"{task.kind}@{task.version}"
            if task.kind in self._model_kinds:
                named = task.input.get("model") if isinstance(task.input, dict) else None
                needed[f"{task.id} model"] = f"model:{named}" if named else ANY_MODEL
        for submission in state.submissions.values():
            if submission.status is not SubmissionStatus.ACCEPTED:
                continue
            what = f"submission {submission.request_id}"
            given = read_input(submission.input)
            if isinstance(given, AnswerInput):
                continue  # for a waiting task: its kind is needed already
            if isinstance(given, TaskInput):
                needed[what] = f"{given.task.kind}@{given.task.version}"
                continue
            needed[what] = self._text_kind
            named = given.model if isinstance(given, TextInput) else None
            needed[f"{what} model"] = f"model:{named}" if named else ANY_MODEL
        return needed
