"""Wake jobs on RQ: "session S may have runnable work" — a hint, never the truth.

* ``RQWakes.wake`` enqueues one RQ job per session at a time: a pending marker
  (``<prefix>:wake:pending:<session>``, set-if-absent) coalesces repeats while a job
  waits in the queue. The consumer deletes the marker as it *takes* the job, before
  driving: a wake that arrives during the drive (a result landing, a submission) enqueues
  a new job, so no wake-up is lost in the instant between a drive and its release.
* Delayed wakes (sleeping tasks, retry backoff) wait in a sorted set
  (``<prefix>:wake:due``, earliest time kept per session) until ``promote_due`` — the
  scheduler's timer — turns the due ones into jobs (a member that is not a session id is
  dropped, counted in ``due_refused`` and logged once).
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
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import redis
from pydantic import TypeAdapter, ValidationError
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer

from contracts import Identifier, StoreUnavailable
from coordination import redis_client
from coordination.attention import Attention, session_ids
from coordination.backlog import RouteBacklog, wake_backlog
from coordination.incarnations import BrainBeat, brains
from coordination.timer import signal

#: Job function path: what RQ records as the job's callable.
JOB_FUNCTION = "coordination.wakes.drive_session"
# Long enough to coalesce a burst; short, so a marker whose job a frozen Brain took
# (SIGSTOP between taking it and clearing the marker) holds back new wakes briefly only.
_PENDING_TTL_S = 5


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

    async def wake(self, session_id: str, *, reason: str, at: datetime | None = None) -> None:
        try:
            if at is not None and at.timestamp() > time.time():
                await asyncio.to_thread(self._later, session_id, at.timestamp())
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
            job.enqueued_at = datetime.now(UTC)
            job.save(pipeline=pipe)
            queue.push_job_id(job.id, pipeline=pipe)
            pipe.execute()

    def _later(self, session_id: str, when: float) -> None:
        with self._sync.pipeline(transaction=False) as pipe:
            # LT: a session keeps its earliest due time
            pipe.zadd(due_key(self.prefix), {session_id: when}, lt=True)
            signal(pipe, self.prefix)  # the scheduler may be waiting past ``when``
            pipe.execute()

    async def promote_due(self, now: float | None = None) -> list[str]:
        """Turn due delayed wakes into wake jobs; the sessions woken."""
        moment = time.time() if now is None else now
        try:
            due = await asyncio.to_thread(self._pop_due, moment)
            for session_id in due:
                await self.wake(session_id, reason="timer")
        except redis.RedisError as error:
            raise StoreUnavailable(f"cannot promote due wakes: {error}") from None
        return due

    def _pop_due(self, moment: float) -> list[str]:
        key = due_key(self.prefix)
        with self._sync.pipeline() as pipe:
            pipe.zrangebyscore(key, "-inf", moment)
            pipe.zremrangebyscore(key, "-inf", moment)
            members, _ = pipe.execute()
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
