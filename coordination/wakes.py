"""Wake jobs on RQ: "session S may have runnable work" — a hint, never the truth.

* ``RQWakes.wake`` enqueues one RQ job per session at a time: a pending marker
  (``<prefix>:wake:pending:<session>``, set-if-absent) coalesces repeats while a job
  waits in the queue. The consumer deletes the marker as it *takes* the job, before
  driving: a wake that arrives during the drive (a result landing, a submission) enqueues
  a new job, so no wake-up is lost in the instant between a drive and its release.
* Delayed wakes (sleeping tasks, retry backoff) wait in a sorted set
  (``<prefix>:wake:due``, earliest time kept per session) until ``promote_due`` — the
  scheduler's timer — turns the due ones into jobs.
* ``WakeWorker`` consumes wake jobs inside a Brain: RQ's own ``SimpleWorker`` bookkeeping
  (the started, finished and failed registries, worker registration), one thread per
  slot, so ``rq info`` shows the truth; the drive itself runs on the Brain's event loop.
* A wake job is data, never code. Jobs are JSON (RQ's default, pickle, runs whatever a
  job's data or meta names the moment a worker reads it), and the worker performs only
  ``drive_session`` with one session id: anything else anyone wrote to the queue is
  refused, counted (``WakeWorker.refused``), logged and moved to RQ's failed registry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol

import redis
import redis.asyncio
from pydantic import TypeAdapter, ValidationError
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.timeouts import BaseDeathPenalty

from contracts import Identifier, StoreUnavailable
from coordination import redis_client
from coordination.attention import Attention
from coordination.backlog import RouteBacklog, wake_backlog
from coordination.incarnations import BrainBeat, brains
from coordination.timer import signal

log = logging.getLogger(__name__)

#: Job function path: what RQ records as the job's callable.
JOB_FUNCTION = "coordination.wakes.drive_session"
# Long enough to coalesce a burst; short, so a marker whose job a frozen Brain took
# (SIGSTOP between taking it and clearing the marker) holds back new wakes briefly only.
_PENDING_TTL_S = 5
#: how long a wake slot's blocking dequeue waits for a job. Short: a Brain frozen (or cut
#: off without its connections closing) keeps its blocked dequeues registered in Redis,
#: which would hand it the next jobs for that long (a 30 s wait let a SIGSTOPped Brain
#: take the wakes of sessions another Brain should run)
BLOCK_S = 1
#: how often an idle slot renews RQ's worker record (its TTL is ``worker_ttl``, 420 s)
HEARTBEAT_S = 15.0
_local = threading.local()


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
        queue.enqueue_call(
            JOB_FUNCTION,
            args=(session_id,),
            job_id=f"wake-{session_id}-{uuid.uuid4().hex[:8]}",
            description=f"wake {session_id}: {reason}",
            timeout=-1,
            result_ttl=600,
            failure_ttl=86400,
        )

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
        return [m.decode() for m in members]

    def close(self) -> None:
        self._sync.close()


class _NoDeathPenalty(BaseDeathPenalty):
    """Drives time themselves (leases, deadlines); RQ's signal timers don't work in
    threads."""

    def setup_death_penalty(self) -> None:
        return None

    def cancel_death_penalty(self) -> None:
        return None


def drive_session(session_id: str) -> str:
    """The wake job: drive ``session_id`` with the Brain whose worker thread runs it."""
    drive: Callable[[str], str] = _local.drive
    return drive(session_id)


class WakeObserver(Protocol):
    """Hears what a wake slot does (``brain.metrics``)."""

    def wake_started(self, waited: float) -> None: ...

    def wake_refused(self, reason: str) -> None: ...


class WakeWorker(SimpleWorker):
    """One RQ worker per Brain slot, in a thread; drives run on the Brain's loop."""

    death_penalty_class = _NoDeathPenalty

    def __init__(
        self,
        queues: list[Queue],
        *,
        name: str,
        connection: redis.Redis,
        prefix: str,
        loop: asyncio.AbstractEventLoop,
        drive: Callable[[str], Coroutine[Any, Any, Any]],
        refused: Counter[str] | None = None,
        observer: WakeObserver | None = None,
    ) -> None:
        super().__init__(queues, name=name, connection=connection, serializer=JSONSerializer)
        self._prefix = prefix
        self._loop = loop
        self._drive = drive
        #: jobs refused, by reason (shared by the Brain's slots)
        self.refused = refused if refused is not None else Counter()
        self._observer = observer

    def execute_job(self, job: Job, queue: Queue) -> None:
        refused = refusal(job)
        if refused is None:
            if self._observer is not None and job.enqueued_at is not None:
                waited = datetime.now(UTC) - job.enqueued_at.replace(tzinfo=UTC)
                self._observer.wake_started(waited.total_seconds())
            super().execute_job(job, queue)
            return
        reason, detail = refused
        self.refused[reason] += 1
        if self._observer is not None:
            self._observer.wake_refused(reason)
        log.warning("refused wake job %s: %s (%s)", job.id, reason, detail)
        self.handle_job_failure(job, queue, exc_string=f"refused: {reason} ({detail})")

    def _install_signal_handlers(self) -> None:
        return None  # the Brain's main thread owns the signals

    @property
    def dequeue_timeout(self) -> int:
        return BLOCK_S

    def set_state(self, state: str, pipeline: Any = None) -> None:
        # RQ writes the idle state at every turn of its dequeue loop: only a change
        if pipeline is None and state == getattr(self, "_state", None):
            return
        super().set_state(state, pipeline=pipeline)

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        # RQ beats twice per turn of its dequeue loop (3 commands each): an idle slot
        # renews its record every HEARTBEAT_S instead; beats with a TTL or a pipeline
        # (a running job's) always go through
        moment = time.monotonic()
        if timeout is None and pipeline is None:
            if moment - getattr(self, "_beat_at", -HEARTBEAT_S) < HEARTBEAT_S:
                return
            self._beat_at = moment
        super().heartbeat(timeout, pipeline)

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Any, Queue] | None:
        # RQ's loop waits for a job forever; ours gives up after each blocking wait to
        # see the flag. A turn costs one BLMOVE: RQ's bookkeeping per turn (state, two
        # heartbeats: 7 commands) is written only when it changes or every HEARTBEAT_S
        # (``set_state``, ``heartbeat``).
        while not self._stop_requested:
            found = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time=BLOCK_S)
            if found is not None:
                return found
        raise StopRequested()

    def work_here(self) -> None:
        """Take wake jobs in this thread until ``stop`` (or until RQ's loop gives up)."""
        _local.drive = self._perform
        self.work(with_scheduler=False)

    def _perform(self, session_id: str) -> str:
        # Taken: later wakes must enqueue anew (no lost wake-up during this drive).
        self.connection.delete(pending_key(self._prefix, session_id))
        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(
            self._drive(session_id), self._loop
        )
        return str(future.result())

    def stop(self) -> None:
        """Stop taking jobs after the blocking dequeue in progress (at most ``BLOCK_S``);
        a job being driven ends first."""
        self._stop_requested = True
