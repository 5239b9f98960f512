"""A long-running Brain worker: drives many sessions at once, each under a fenced lease.

For a wake it takes the session's lease in Redis (a fence above the store's high-water
mark), drives the session with that fence — the store's claim makes a stale holder
unable to commit anything —, extends the lease while phases run, releases it when
nothing is runnable, and asks for a delayed wake when a timer is due. A wake for a
session another Brain is driving is handed back to the queue a moment later, so it is
never lost. Wake jobs arrive through RQ (``coordination.wakes.WakeWorker``), one thread
per slot; the drives themselves run on this process's event loop.

The lease keeper retries transient Redis errors until the lease's own deadline, which
it knows from this host's monotonic clock (``coordination.leases.LeaseProof``); the
drive checks that proof before every side effect, and the keeper stops the drive before
the lease can lapse. While it runs, the Brain beats its incarnation record
(``coordination.incarnations``): a later holder tells from it whether an interrupted
phase start was a crash (this process gone) or a lost lease (this process alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

from brain.runner import DriveReport, SessionRunner
from contracts import LeaseLost, StoreUnavailable
from coordination import redis_client
from coordination.incarnations import RedisIncarnations
from coordination.leases import LeaseProof
from coordination.protocols import Lease, LeaseStore
from coordination.routes import Routes, model_offers, route_of
from coordination.wakes import RQWakes, WakeWorker, wake_queue
from runtime.cancellation import cancel_and_wait
from runtime.logs import log_context

log = logging.getLogger(__name__)

#: how often dead wake slots are looked for
SUPERVISE_S = 1.0


class BrainService:
    def __init__(
        self,
        *,
        runner: SessionRunner,
        leases: LeaseStore,
        wakes: RQWakes,
        redis_url: str,
        concurrency: int = 8,
        lease_ttl: timedelta = timedelta(seconds=10),
        busy_retry: timedelta = timedelta(milliseconds=200),
        routes: Routes | None = None,
        model: str | None = None,
        watch_after: timedelta = timedelta(seconds=30),
    ) -> None:
        """With ``routes``, this Brain advertises what it runs (its kinds and versions,
        and ``model``, its model configuration) and takes the wakes of its route only
        (sessions it can run); without, the wake queue's default route."""
        self.runner = runner
        #: a session left waiting on the Hands is looked at again by the scheduler this
        #: long after (``coordination.attention``): a lost dispatch is re-issued
        self.watch_after = watch_after
        self.leases = leases
        self.wakes = wakes
        self.redis_url = redis_url
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        #: after SIGTERM, how long running drives may take to end (then the leases are
        #: handed back all the same: a drive still running commits nothing past them)
        self.drain = timedelta(seconds=10)
        self.busy_retry = busy_retry
        self.routes = routes
        #: what this Brain advertises: its kinds and versions, and its model by name
        self.offers = (*runner.registry.compatibility(), *model_offers(model))
        self.route = route_of(self.offers) if routes is not None else wakes.route
        self.reports: list[DriveReport] = []
        #: liveness evidence of this and other Brain incarnations (restart limit)
        self._evidence = redis_client.connect(redis_url)
        self.incarnations = RedisIncarnations(self._evidence, prefix=wakes.prefix)
        #: each wake slot's RQ worker (made in the slot's thread) and thread, by slot
        self._workers: dict[int, WakeWorker] = {}
        #: wake jobs refused (not the wake function of one session id), by reason
        self.refused_wakes: Counter[str] = Counter()
        self._threads: dict[int, threading.Thread] = {}
        #: wake slots started again after their loop ended while the Brain ran
        self.slot_restarts = 0
        #: set (by ``shutdown``) before any slot is told to stop: threads read it
        self._stopping = threading.Event()
        self._held: dict[str, Lease] = {}
        self._driving: set[str] = set()
        self._again: set[str] = set()
        self._stopped = asyncio.Event()
        self.metrics = runner.services.metrics
        self.metrics.slots(concurrency, lambda: len(self._driving))

    @property
    def holder(self) -> str:
        return self.runner.services.runner_id

    async def holds_its_route(self) -> None:
        """Readiness: every wake slot's worker runs and, with routes, this Brain's route
        is advertised in Redis (so the scheduler can wake it)."""
        running = sum(thread.is_alive() for thread in self._threads.values())
        if running < self.concurrency:
            raise RuntimeError(f"{self.concurrency - running} wake slots are not running")
        if self.routes is not None and self.route not in await self.routes.live():
            raise RuntimeError(f"route {self.route} is not advertised")

    async def run(self) -> None:
        """Consume wake jobs with ``concurrency`` slots until ``shutdown``."""
        loop = asyncio.get_running_loop()
        advertising = None
        if self.routes is not None:
            await self.routes.advertise(self.offers)
            advertising = asyncio.create_task(self._advertise(self.routes))
        beating = asyncio.create_task(self._beat())
        for slot in range(self.concurrency):
            self._start_slot(slot, loop)
        supervising = asyncio.create_task(self._supervise(loop))
        await self._stopped.wait()
        await cancel_and_wait(beating, supervising)
        if advertising is not None:
            await cancel_and_wait(advertising)

    def _start_slot(self, slot: int, loop: asyncio.AbstractEventLoop) -> None:
        name = f"{self.holder}.{slot}.{uuid.uuid4().hex[:6]}"
        thread = threading.Thread(
            target=self._slot, args=(slot, name, loop), name=name, daemon=True
        )
        self._threads[slot] = thread
        thread.start()

    def _slot(self, slot: int, name: str, loop: asyncio.AbstractEventLoop) -> None:
        """One wake slot, in its own thread: its RQ worker is made here, not on the loop
        (making one talks to Redis, which may be down). It ends when the worker's loop
        ends: by ``shutdown``, or when RQ gave up on an error (``_supervise``)."""
        # A client (connection pool) per slot: an RQ worker keeps one connection for its
        # pubsub and one for its blocking dequeue, and redis-py caps a pool at 100
        # connections, so a shared pool ran dry past ~50 slots and killed the rest.
        # Named after the worker, each of its connections (``CLIENT LIST`` shows the slot)
        connection = redis_client.connect_sync(self.redis_url, client_name=name)
        try:
            worker = WakeWorker(
                [wake_queue(self.wakes.prefix, self.route, connection)],
                name=name,
                connection=connection,
                prefix=self.wakes.prefix,
                loop=loop,
                drive=self.drive,
                refused=self.refused_wakes,
                observer=self.metrics,
            )
            self._workers[slot] = worker
            if not self._stopping.is_set():
                worker.work_here()
        except Exception as error:  # Redis away while the worker registers: try later
            log.warning("wake slot %d could not start: %s", slot, error)
        finally:
            connection.close()

    async def _supervise(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a slot again whose thread ended while the Brain runs: RQ's loop quits on
        an error outside its dequeue (Redis going away as a job ends, a restart under
        load), and a Brain with dead slots takes fewer wakes, or none, for good. A slot
        that keeps ending within a minute waits longer each time (1 s doubling to 30 s)."""
        started = {slot: loop.time() for slot in self._threads}
        delay: dict[int, float] = {}
        due: dict[int, float] = {}
        while True:
            await asyncio.sleep(SUPERVISE_S)
            now = loop.time()
            for slot, thread in list(self._threads.items()):
                if thread.is_alive() or self._stopping.is_set():
                    continue
                if slot not in due:
                    lasted = now - started.get(slot, now)
                    delay[slot] = 1.0 if lasted > 60 else min(delay.get(slot, 0.5) * 2, 30.0)
                    due[slot] = now + delay[slot]
                    log.warning("wake slot %d stopped; starting it in %.0f s", slot, delay[slot])
                elif now >= due[slot]:
                    del due[slot]
                    started[slot] = now
                    self.slot_restarts += 1
                    self._start_slot(slot, loop)

    async def _advertise(self, routes: Routes) -> None:
        while True:
            await asyncio.sleep(routes.lifetime / 3)
            try:
                await routes.advertise(self.offers)
            except StoreUnavailable as error:
                log.warning("cannot advertise: %s", error.message)
            except Exception:  # one bad advertisement must not stop the advertising
                log.exception("advertising failed")

    @property
    def beat_interval(self) -> float:
        return self.lease_ttl.total_seconds() / 3

    async def _beat(self) -> None:
        while True:
            try:
                stats: dict[str, str | float] = {
                    "route": self.route,
                    "slots": self.concurrency,
                    "in_use": len(self._driving),
                    "leases": len(self._held),
                    "beat_at": round(time.time(), 3),
                }
                await self.incarnations.beat(self.holder, self.runner.services.process, stats=stats)
            except StoreUnavailable as error:
                log.warning("cannot beat: %s", error.message)
            except Exception:  # one bad beat must not stop the beating
                log.exception("beat failed")
            await asyncio.sleep(self.beat_interval)

    async def holder_alive(self, holder: str) -> bool:
        """Whether the Brain incarnation ``holder`` is alive (``coordination.incarnations``):
        its interrupted phase starts are then not crashes."""
        if holder == self.holder:
            return True
        return await self.incarnations.alive(holder, window=2.5 * self.beat_interval)

    async def shutdown(self) -> None:
        """Stop taking wakes, let running drives end, hand leases back."""
        self._stopping.set()
        for worker in list(self._workers.values()):
            worker.stop()
        self._stopped.set()
        deadline = time.monotonic() + self.drain.total_seconds()  # once, for every slot
        for thread in list(self._threads.values()):
            await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
        for lease in list(self._held.values()):
            with contextlib.suppress(Exception):
                await self.leases.release(lease)
        await self._evidence.aclose()

    async def drive(self, session_id: str) -> str:
        """One wake of one session: lease, drive, release. A session this Brain is
        driving already is not driven twice (its lease, same holder, would allow it):
        the wake goes back to the queue for after that drive."""
        if session_id in self._driving:
            self._again.add(session_id)  # news for the running drive: drive once more after
            return "busy here: again after the running drive"
        self._driving.add(session_id)  # no await since the check: one drive per session
        try:
            with log_context(session_id=session_id):
                return await self._drive(session_id)
        finally:
            self._driving.discard(session_id)
            if session_id in self._again:
                self._again.discard(session_id)
                await self.wakes.wake(session_id, reason="again")

    async def _busy(self, session_id: str) -> str:
        self.metrics.drive("busy")
        await asyncio.sleep(self.busy_retry.total_seconds())
        await self.wakes.wake(session_id, reason="busy")
        return "busy"

    async def _drive(self, session_id: str) -> str:
        # One load per wake: it gives the fence floor, tells whether this Brain's claim
        # is the stored one (then it gets that fence back and writes no new claim), and
        # is what the drive starts from — everything that caused this wake was committed
        # before the wake was queued, and anything committed later queues a wake of its own.
        handle = await self.runner.store.session(session_id)
        sent_at = time.monotonic()
        lease = await self.leases.acquire(
            session_id,
            self.holder,
            ttl=self.lease_ttl,
            floor=handle.fence,
            claimed=handle.holder == self.holder,
        )
        if lease is None:  # another Brain drives it now: look again after its release
            return await self._busy(session_id)
        self._held[session_id] = lease
        proof = LeaseProof(lease, sent_at)
        driving = asyncio.create_task(
            self.runner.drive(
                session_id,
                fence=lease.fence,
                lease=proof,
                holder_alive=self.holder_alive,
                handle=handle,
            )
        )
        keeping = asyncio.create_task(self._keep(proof, driving))
        try:
            report = await driving
        except asyncio.CancelledError:
            log.warning("session %s: lease lost; dropped the drive", session_id)
            self.metrics.drive("lease_lost")
            return "lease lost"
        finally:
            self._held.pop(session_id, None)
            try:  # the keeper stopped for sure before the release: no extension after it
                await cancel_and_wait(keeping)
            finally:
                with contextlib.suppress(Exception):
                    await self.leases.release(lease)
        self.reports.append(report)
        self.metrics.drive("fenced" if report.fenced else "driven")
        if report.next_wake_at is not None and not report.fenced:
            await self.wakes.wake(session_id, reason="timer", at=report.next_wake_at)
        if report.awaiting and not report.fenced:
            await self.wakes.attention.watch(session_id, after=self.watch_after)
        return f"fence {report.fence}: {report.commits} commits, active={report.active}"

    async def _keep(self, proof: LeaseProof, driving: asyncio.Task[DriveReport]) -> None:
        """Extend the lease every third of its TTL. A transient error (Redis away, a reply
        that does not come) is retried until the lease's own deadline; the drive is
        stopped when the lease is lost, or before it can lapse unproven."""
        every = self.lease_ttl.total_seconds() / 3
        retry = min(every / 5, 0.5)
        wait = every
        while True:
            await asyncio.sleep(wait)
            if not proof.proven:
                log.warning(
                    "session %s: lease not provable any more (%.3f s left); dropping the drive",
                    proof.lease.session_id,
                    proof.remaining(),
                )
                self.metrics.lease_lost("lapsed")
                await cancel_and_wait(driving)
                return
            sent_at = time.monotonic()
            try:
                async with asyncio.timeout(proof.remaining()):  # a hung reply is a failure
                    lease = await self.leases.extend(proof.lease, ttl=self.lease_ttl)
            except LeaseLost as lost:
                log.warning("%s", lost.message)
                self.metrics.lease_lost("taken")
                await cancel_and_wait(driving)
                return
            except (StoreUnavailable, TimeoutError) as error:
                log.warning(
                    "session %s: lease extension failed (%s); retrying for %.3f s more",
                    proof.lease.session_id,
                    getattr(error, "message", None) or type(error).__name__,
                    proof.remaining(),
                )
                wait = retry
                continue
            proof.renewed(lease, sent_at)
            wait = every
