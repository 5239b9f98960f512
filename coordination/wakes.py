"""Wake jobs on RQ: "session S may have runnable work" — a hint, never the truth.

* ``RQWakes.wake`` enqueues one RQ job per session at a time: a pending marker
  (``<prefix>:wake:pending:<session>``, set-if-absent) coalesces repeats while a job
  waits in the queue. The consumer deletes the marker as it *takes* the job, before
  driving: a wake that arrives during the drive (a result landing, a submission) enqueues
  a new job, so no wake-up is lost in the instant between a drive and its release.
* Delayed wakes (sleeping tasks, retry backoff) wait in a sorted set
  (``<prefix>:wake:due``, earliest time kept per session) until ``promote_due`` — the
  scheduler's timer — turns the due ones into jobs (a member that is not a session id is
  dropped, counted in ``due_refused`` and logged once). The asker gives a delay (a
  duration on its own clock); the due time is Redis's ``TIME`` plus it, and
  ``promote_due`` compares with ``TIME`` again: no host's clock meets another's
  (invariant 17).
* A job's hash holds ``bh_enqueued``, Redis's ``TIME`` when it was queued, for the
  backlog's age (``coordination.backlog``) and the wait of a wake
  (``coordination.consumer``); RQ's ``enqueued_at`` is the enqueuer's clock, for ``rq``.
* ``coordination.consumer.WakeConsumer`` takes the jobs inside a Brain: one blocking
  dequeue for the whole Brain, three commands per wake, instead of RQ's worker and its
  per-job bookkeeping.
* A wake job is data, never code. Jobs are JSON (RQ's default, pickle, runs whatever a
  job's data or meta names the moment a worker reads it), and the consumer performs only
  ``drive_session`` with one session id: anything else anyone wrote to the queue is
  refused, counted (``WakeConsumer.refused``), logged and moved to RQ's failed registry.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import redis
from pydantic import TypeAdapter, ValidationError
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer

from contracts import Identifier, StoreUnavailable
from coordination import redis_client
from coordination.attention import Attention, session_ids
from coordination.backlog import ENQUEUED_FIELD, RouteBacklog, wake_backlog
from coordination.incarnations import BrainBeat, brains
from coordination.timer import timer_key

#: Job function path: what RQ records as the job's callable.
JOB_FUNCTION = "coordination.wakes.drive_session"
# Long enough to coalesce a burst; short, so a marker whose job a frozen Brain took
# (SIGSTOP between taking it and clearing the marker) holds back new wakes briefly only.
_PENDING_TTL_S = 5
# KEYS: job hash, queue list. ARGV: job id, stamp field. Stamps the job with Redis's
# clock ("<seconds>.<micros>") and queues it.
_STAMP_AND_PUSH = """
pcall(redis.replicate_commands)
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[2], t[1] .. '.' .. string.format('%06d', tonumber(t[2])))
redis.call('RPUSH', KEYS[2], ARGV[1])
"""
# KEYS: due set, timer list. ARGV: session id, delay (seconds). Due at Redis's clock plus
# the delay; LT: a session keeps its earliest due time. The timer list is signalled (the
# scheduler may be waiting past the new due time: ``coordination.timer``).
_LATER = """
pcall(redis.replicate_commands)
local t = redis.call('TIME')
local due = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'LT', string.format('%.6f', due), ARGV[1])
redis.call('LPUSH', KEYS[2], 1)
redis.call('LTRIM', KEYS[2], 0, 0)
"""
# KEYS: due set. Takes the members due by Redis's clock.
_POP_DUE = """
pcall(redis.replicate_commands)
local t = redis.call('TIME')
local now = string.format('%d.%06d', t[1], t[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #due > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
return due
"""


def pending_key(prefix: str, session_id: str) -> str:
    return f"{prefix}:wake:pending:{session_id}"


def due_key(prefix: str) -> str:
    return f"{prefix}:wake:due"


def queue_name(prefix: str, route: str = "default") -> str:
    return f"{prefix}-wakes-{route}"


def wake_queue(prefix: str, route: str, connection: redis.Redis) -> Queue:
    """The RQ queue of ``route``'s wake jobs, read and written as JSON only."""
    return Queue(queue_name(prefix, route), connection=connection, serializer=JSONSerializer)


_SESSION_ID: TypeAdapter[str] = TypeAdapter(Identifier)


def refusal(job: Job) -> tuple[str, str] | None:
    """Why ``job`` is not a wake job, as (reason, detail); None: it is ``drive_session``
    of one session id."""
    try:
        name, args, kwargs = job.func_name, job.args, job.kwargs
    except Exception as error:  # not JSON, or not RQ's job layout
        return "unreadable job data", type(error).__name__
    if name != JOB_FUNCTION:
        return "not the wake function", repr(str(name)[:80])
    if kwargs or not isinstance(args, (list, tuple)) or len(args) != 1:
        return (
            "a wake takes exactly one session id",
            f"{len(args or ())} args, {len(kwargs or {})} kwargs",
        )
    try:
        _SESSION_ID.validate_python(args[0], strict=True)
    except ValidationError:
        return "its argument is not a session id", repr(str(args[0])[:80])
    return None


Router = Callable[[str], Awaitable[str | None]]


class RQWakes:
    """Enqueues wake jobs on the queue of the Brains that can run the session: the
    ``router``'s choice (None from it: nobody can, so no job), else ``route``."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "bh",
        route: str = "default",
        router: Router | None = None,
    ) -> None:
        self.prefix = prefix
        self.route = route
        self.router = router
        self._sync = redis_client.connect_sync(url)  # the password from its passfile
        self._queues: dict[str, Queue] = {}
        self._later_script = self._sync.register_script(_LATER)
        self._pop_due_script = self._sync.register_script(_POP_DUE)
        #: sessions the scheduler must look at again (``coordination.attention``)
        self.attention = Attention(self._sync, prefix=prefix)
        #: members of the due set dropped as they came due, by reason (not session ids)
        self.due_refused: Counter[str] = Counter()

    async def check(self) -> None:
        await asyncio.to_thread(self._sync.ping)

    async def brains(self) -> list[BrainBeat]:
        """The Brain incarnations that beat (``coordination.incarnations``)."""
        return await asyncio.to_thread(brains, self._sync, self.prefix)

    async def backlog(self) -> list[RouteBacklog]:
        """Waiting wakes per route, the oldest one's age, and whether a Brain serves it."""
        return await asyncio.to_thread(wake_backlog, self._sync, self.prefix)

    async def wake(self, session_id: str, *, reason: str, after: timedelta | None = None) -> None:
        try:
            if after is not None and after > timedelta(0):
                await asyncio.to_thread(self._later, session_id, after.total_seconds())
                return
            route = self.route if self.router is None else await self.router(session_id)
            if route is not None:
                await asyncio.to_thread(self._now, session_id, reason, route)
        except redis.RedisError as error:
            raise StoreUnavailable(f"cannot queue a wake of {session_id}: {error}") from None

    def _now(self, session_id: str, reason: str, route: str) -> None:
        marker = pending_key(self.prefix, session_id)
        if not self._sync.set(marker, reason, nx=True, ex=_PENDING_TTL_S):
            return  # a wake job of this session is already waiting
        queue = self._queues.get(route)
        if queue is None:
            queue = self._queues[route] = wake_queue(self.prefix, route, self._sync)
        with self._sync.pipeline(transaction=False) as pipe:
            # RQ's list of queues, every time: the backlog of a route nobody serves is
            # read from it (scaling from zero), and a Redis that lost its data lost it
            pipe.sadd(queue.redis_queues_keys, queue.key)
            # An RQ job, saved and pushed in the same round trip: RQ's own enqueue adds
            # a transaction and a second write of the job (6 commands instead of 3)
            job = queue.create_job(
                JOB_FUNCTION,
                args=(session_id,),
                job_id=f"wake-{session_id}-{uuid.uuid4().hex[:8]}",
                description=f"wake {session_id}: {reason}",
                timeout=-1,
                result_ttl=600,
                failure_ttl=86400,
            )
            job.enqueued_at = datetime.now(UTC)  # for rq's tools (this host's clock)
            job.save(pipeline=pipe)
            # EVAL, not EVALSHA: a script in a pipeline costs redis-py a SCRIPT EXISTS
            # round trip on every execute
            pipe.eval(_STAMP_AND_PUSH, 2, job.key, queue.key, job.id, ENQUEUED_FIELD)
            pipe.execute()

    def _later(self, session_id: str, delay: float) -> None:
        self._later_script(
            keys=[due_key(self.prefix), timer_key(self.prefix)], args=[session_id, delay]
        )

    async def promote_due(self) -> list[str]:
        """Turn the delayed wakes due by Redis's clock into wake jobs; the sessions woken."""
        try:
            due = await asyncio.to_thread(self._pop_due)
            for session_id in due:
                await self.wake(session_id, reason="timer")
        except redis.RedisError as error:
            raise StoreUnavailable(f"cannot promote due wakes: {error}") from None
        return due

    def _pop_due(self) -> list[str]:
        members = self._pop_due_script(keys=[due_key(self.prefix)])
        return session_ids(members, self.due_refused, where="due set")

    def close(self) -> None:
        self._sync.close()


def drive_session(session_id: str) -> str:
    """The wake job's function as RQ records it. Brains take wake jobs with their own
    consumer (``coordination.consumer``), never through RQ's worker: an ``rq worker``
    pointed at a wake queue fails each job here, and the session is woken again by the
    scheduler."""
    raise RuntimeError(
        f"wake of {session_id}: wake jobs are taken by Brains (brain serve), not rq worker"
    )
