"""The wake consumer: one per Brain, taking its route's RQ wake jobs for its slots.

RQ's own worker keeps a job's whole life in Redis — started, finished and failed
registries, the job hash rewritten at each step, a result stream, worker state and
heartbeats: about 35 commands per wake, and with one worker per slot, a blocking dequeue
per slot per second when idle. A wake is a hint ("session S may have work"), so its
consumer needs far less: one blocking ``BLPOP`` at a time for the whole Brain, and only
while a slot is free (a busy Brain leaves wakes to the others); then the job's hash read
(``HGETALL``), checked exactly as before (``coordination.wakes.refusal``: JSON, the wake
function, one session id), and deleted with the session's pending marker in one round
trip. Three commands per wake; one ``BLPOP`` per second when idle, whatever the slots.

What RQ's bookkeeping gave and how it is kept: ``rq info`` still shows the queue and its
waiting jobs (they are RQ jobs, enqueued by ``RQWakes``), refused jobs and drives that
raised still go to RQ's failed registry with the reason. A job taken by a Brain that then
dies is not kept in a list to recover: as before (RQ's intermediate list was cleaned by
its maintenance only), the session is found again by the scheduler — the attention set,
lapsed leases, the audit. A frozen Brain holds at most one blocked dequeue (not one per
slot), and for at most ``BLOCK_S``.

**Admission.** Slots bound how many sessions a Brain drives at once, not how fast it
starts them: thousands of slots taking a burst of wakes at once swamped the event loop,
and the leases the Brain already held lapsed unproven (at 4 Brains of 1,000 slots,
5,000 dropped drives for 4,000 sessions). The consumer watches how late the loop runs a
timer, and lets the loop turn once before each wake it takes (a turn grows with the
drives starting in it); it takes no new wake while the loop is more than
``LAG_LIMIT_S`` behind: the drives it has go on, their leases kept, and the wakes wait
in the queue for this Brain or another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

import redis
import redis.asyncio
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry
from rq.serializers import JSONSerializer

from coordination.backlog import ENQUEUED_FIELD, enqueued
from coordination.wakes import pending_key, refusal, wake_queue
from runtime.cancellation import cancel_and_wait

log = logging.getLogger(__name__)

#: how long one blocking dequeue waits for a job: short, because a frozen Brain (or one
#: cut off without its connection closing) keeps its blocked dequeue registered in Redis
#: and would be handed the next job for that long
BLOCK_S = 1
#: pauses after Redis failed a dequeue, doubling
_RETRY_S = (0.5, 5.0)
#: the event loop is behind by more than this: no new wake is taken until it catches up
LAG_LIMIT_S = 0.1
#: how often the loop's lag is read (a timer of this length, and how late it fires)
_LAG_EVERY_S = 0.05
_FAILURE_TTL_S = 86400

# KEYS: the job, the session's pending marker. Deletes both; Redis's clock (seconds).
_TAKEN = """
pcall(redis.replicate_commands)
redis.call('DEL', KEYS[1], KEYS[2])
local t = redis.call('TIME')
return t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
"""


class WakeObserver(Protocol):
    """Hears what the consumer does (``brain.metrics``)."""

    def wake_started(self, waited: float) -> None: ...

    def wake_refused(self, reason: str) -> None: ...


Drive = Callable[[str], Awaitable[str]]


class WakeConsumer:
    """``run()`` takes wakes until ``stop()``; ``drain(within)`` waits for the drives."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        failures: redis.Redis,
        *,
        prefix: str,
        route: str,
        slots: int,
        drive: Drive,
        refused: Counter[str] | None = None,
        observer: WakeObserver | None = None,
    ) -> None:
        """``client``: this consumer's own (its blocking dequeue holds a connection);
        ``failures``: a blocking client for RQ's failed registry (a rare path)."""
        self._client = client
        self._taken_script = client.register_script(_TAKEN)
        self._queue = wake_queue(prefix, route, failures)
        self._prefix = prefix
        self._slots = asyncio.Semaphore(slots)
        self._drive = drive
        #: jobs refused, by reason
        self.refused = refused if refused is not None else Counter()
        self._observer = observer
        self._drives: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        #: the dequeue loop is running (readiness)
        self.running = False
        #: how late the event loop last ran a timer, seconds (``_watch_lag``)
        self.lag = 0.0
        self._calm = asyncio.Event()  # set while the lag is within LAG_LIMIT_S
        self._calm.set()

    async def run(self) -> None:
        self.running = True
        pause = _RETRY_S[0]
        watching = asyncio.create_task(self._watch_lag())
        try:
            while await self._free_slot():  # a slot first: a busy Brain leaves wakes
                await self._admit()
                try:
                    job_id = await self._take()
                except (redis.RedisError, OSError) as error:
                    self._slots.release()
                    log.warning("wake dequeue failed: %s; again in %.1f s", error, pause)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _RETRY_S[1])
                    continue
                pause = _RETRY_S[0]
                if job_id is None:
                    self._slots.release()
                    continue
                task = asyncio.create_task(self._perform(job_id))
                self._drives.add(task)
                task.add_done_callback(self._drives.discard)
        finally:
            self.running = False
            await cancel_and_wait(watching)

    async def _watch_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(_LAG_EVERY_S)
            self.lag = max(0.0, loop.time() - started - _LAG_EVERY_S)
            if self.lag > LAG_LIMIT_S and not self._stopping.is_set():
                self._calm.clear()
            else:
                self._calm.set()

    async def _admit(self) -> None:
        """Wait, holding the slot, until a drive may start: one turn of the event loop
        first — every ready drive takes its next step — so a burst of wakes is taken
        only as fast as the loop turns (a turn grows with the drives starting in it),
        and not at all while the loop runs timers more than ``LAG_LIMIT_S`` late."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(0)
        if loop.time() - started > LAG_LIMIT_S:
            self._calm.clear()  # the watcher sets it again once the loop catches up
        await self._calm.wait()

    def stop(self) -> None:
        """Take no more wakes: the dequeue in progress ends within ``BLOCK_S``."""
        self._stopping.set()
        self._calm.set()

    async def _free_slot(self) -> bool:
        """A slot taken, or False once stopping (also while every slot is busy)."""
        if self._stopping.is_set():
            return False
        if not self._slots.locked():
            await self._slots.acquire()  # free now: no wait
            return True
        acquiring = asyncio.ensure_future(self._slots.acquire())
        stopping = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        await cancel_and_wait(acquiring, stopping)
        got = acquiring.done() and not acquiring.cancelled()
        if got and self._stopping.is_set():
            self._slots.release()
            return False
        return got

    async def drain(self, within: float) -> None:
        """Wait up to ``within`` seconds, once, for the drives running now."""
        if self._drives:
            await asyncio.wait(set(self._drives), timeout=within)

    async def _take(self) -> str | None:
        taken = await self._client.blpop([self._queue.key], timeout=BLOCK_S)
        if taken is None:
            return None
        job_id = _text(taken[1])
        if self._stopping.is_set():  # taken as the Brain stops: back to the head, for another
            await self._client.lpush(self._queue.key, job_id)
            return None
        return job_id

    async def _perform(self, job_id: str) -> None:
        try:
            try:
                read = await self._read(job_id)
                session_id = None if read is None else await self._taken(*read)
            except (redis.RedisError, OSError) as error:
                await self._give_back(job_id, error)
                return
            if read is None or session_id is None:  # refused, or gone under the queue
                return
            job = read[0]
            try:
                await self._drive(session_id)
            except Exception as error:
                log.exception("wake job %s: the drive of %s failed", job_id, session_id)
                await self._fail(job, f"{type(error).__name__}: {error}")
        finally:
            self._slots.release()

    async def _give_back(self, job_id: str, error: Exception) -> None:
        """Redis failed between the dequeue and the drive: the job goes back to the
        queue's head when Redis answers again (else the scheduler finds the session)."""
        log.warning(
            "wake job %s: Redis failed before its drive (%s); handing it back", job_id, error
        )
        with contextlib.suppress(redis.RedisError, OSError):
            await self._client.lpush(self._queue.key, job_id)

    async def _read(self, job_id: str) -> tuple[Job, float | None] | None:
        """The job, checked, and when it was queued (Redis's clock; None: not stamped);
        a refused one goes to the failed registry."""
        job = Job(job_id, connection=self._queue.connection, serializer=JSONSerializer)
        raw = await self._client.hgetall(job.key)
        if not raw:
            return None  # deleted under the queue (a flush): nothing to drive
        job.restore(raw)
        refused = refusal(job)
        if refused is None:
            return job, enqueued(raw.get(ENQUEUED_FIELD.encode()))
        reason, detail = refused
        self.refused[reason] += 1
        if self._observer is not None:
            self._observer.wake_refused(reason)
        log.warning("refused wake job %s: %s (%s)", job_id, reason, detail)
        await self._fail(job, f"refused: {reason} ({detail})")
        return None

    async def _taken(self, job: Job, queued: float | None) -> str:
        """The job's session; the job and the session's pending marker deleted now, so
        a wake arriving during the drive queues a new job. Its wait is Redis's clock now
        minus ``queued`` (a job queued by an older build, unstamped, is not measured)."""
        session_id = str(job.args[0])
        now = await self._taken_script(keys=[job.key, pending_key(self._prefix, session_id)])
        if self._observer is not None and queued is not None:
            self._observer.wake_started(max(0.0, float(now) - queued))
        return session_id

    async def _fail(self, job: Job, why: str) -> None:
        """Into RQ's failed registry, so ``rq info`` shows it (best effort)."""

        def record() -> None:
            registry = FailedJobRegistry(queue=self._queue)
            with self._queue.connection.pipeline() as pipe:
                job.set_status(JobStatus.FAILED, pipeline=pipe)
                job.ended_at = datetime.now(UTC)
                registry.add(job, ttl=_FAILURE_TTL_S, exc_string=why, pipeline=pipe)
                pipe.execute()

        with contextlib.suppress(redis.RedisError, OSError):
            await asyncio.to_thread(record)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
