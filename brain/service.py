"""A long-running Brain worker: drives many sessions at once, each under a fenced lease.

For a wake it takes the session's lease in Redis (a fence above the store's high-water
mark), drives the session with that fence — the store's claim makes a stale holder
unable to commit anything —, extends the lease while phases run, releases it when
nothing is runnable, and asks for a delayed wake when a timer is due. A wake for a
session another Brain is driving is handed back to the queue a moment later, so it is
never lost. Wake jobs are RQ jobs, taken by one consumer per Brain
(``coordination.consumer``) while a slot is free; drives run on this process's loop.

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
import os
import time
from collections import Counter, deque
from datetime import timedelta

import redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from brain.runner import DriveReport, SessionRunner
from contracts import BrainhandsError, LeaseLost, StoreUnavailable
from coordination import redis_client
from coordination.consumer import WakeConsumer
from coordination.extensions import Extensions
from coordination.incarnations import RedisIncarnations
from coordination.leases import LeaseProof
from coordination.protocols import Lease, LeaseStore
from coordination.routes import Routes, model_offers, route_of
from coordination.wakes import RQWakes
from runtime.cancellation import cancel_and_wait
from runtime.logs import log_context

log = logging.getLogger(__name__)

#: drive reports a Brain keeps for looking at (tests, a debugger); the count is kept
REPORTS_KEPT = 1000
#: how soon a failed advertisement is tried again
_READVERTISE_S = 1.0


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
        #: the drives' lease extensions, sent together when they come due together
        self._extensions = Extensions(leases, ttl=lease_ttl)
        #: after SIGTERM, how long running drives may take to end (then the leases are
        #: handed back all the same: a drive still running commits nothing past them)
        self.drain = timedelta(seconds=10)
        self.busy_retry = busy_retry
        self.routes = routes
        #: what this Brain advertises: its kinds and versions, and its model by name
        self.offers = (*runner.registry.compatibility(), *model_offers(model))
        self.route = route_of(self.offers) if routes is not None else wakes.route
        #: the newest drive reports (bounded: a Brain runs for months), and how many
        self.reports: deque[DriveReport] = deque(maxlen=REPORTS_KEPT)
        self.drives = 0
        #: liveness evidence of this and other Brain incarnations (restart limit)
        self._evidence = redis_client.connect_bounded(
            redis_url, connections=8, name=f"brain-{os.getpid()}"
        )
        self.incarnations = RedisIncarnations(self._evidence, prefix=wakes.prefix)
        #: wake jobs refused (not the wake function of one session id), by reason
        self.refused_wakes: Counter[str] = Counter()
        # The consumer's own clients: its blocking dequeue holds a connection, named
        # after this Brain (``CLIENT LIST`` shows it); a blocking one for RQ's failed
        # registry
        self._taking = redis_client.connect(
            redis_url,
            client_name=f"{self.holder}.wakes",
            socket_timeout=30,
            # a pooled connection Redis dropped (a restart) is replaced and the command
            # sent again, not failed: redis-py retries only the errors listed here
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        )
        self._failures = redis_client.connect_sync(redis_url)
        self.consumer = WakeConsumer(
            self._taking,
            self._failures,
            prefix=wakes.prefix,
            route=self.route,
            slots=concurrency,
            drive=self.drive,
            refused=self.refused_wakes,
            observer=runner.services.metrics,
        )
        self._held: dict[str, Lease] = {}
        self._driving: set[str] = set()
        self._again: set[str] = set()
        self._stopped = asyncio.Event()
        self._consuming: asyncio.Task[None] | None = None
        self.metrics = runner.services.metrics
        self.metrics.slots(concurrency, lambda: len(self._driving))

    @property
    def holder(self) -> str:
        return self.runner.services.runner_id

    async def holds_its_route(self) -> None:
        """Readiness: the wake consumer runs and, with routes, this Brain's route is
        advertised in Redis (so the scheduler can wake it)."""
        if not self.consumer.running:
            raise RuntimeError("the wake consumer is not running")
        if self.routes is not None and self.route not in await self.routes.live():
            raise RuntimeError(f"route {self.route} is not advertised")

    async def run(self) -> None:
        """Take wake jobs for ``concurrency`` slots until ``shutdown``."""
        advertising = None
        if self.routes is not None:
            advertising = asyncio.create_task(self._advertise(self.routes))
        beating = asyncio.create_task(self._beat())
        self._consuming = asyncio.create_task(self.consumer.run())
        await self._stopped.wait()
        await self._consuming  # ends within its blocking dequeue's wait once stopped
        await cancel_and_wait(beating)
        if advertising is not None:
            await cancel_and_wait(advertising)

    async def _advertise(self, routes: Routes) -> None:
        """Advertise now and every third of the lifetime; a failed advertisement (Redis
        away, even at start) is tried again after a second, so the route is back — and
        the Brain ready — within a second of Redis."""
        while True:
            renew = routes.lifetime / 3
            try:
                await routes.advertise(self.offers)
            except StoreUnavailable as error:
                log.warning("cannot advertise: %s", error.message)
                renew = min(renew, _READVERTISE_S)
            except Exception:  # one bad advertisement must not stop the advertising
                log.exception("advertising failed")
                renew = min(renew, _READVERTISE_S)
            await asyncio.sleep(renew)

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
        self.consumer.stop()
        self._stopped.set()
        await self.consumer.drain(self.drain.total_seconds())  # once, for every slot
        if self._consuming is not None:  # its dequeue ends (within 1 s) before the close
            await asyncio.wait({self._consuming}, timeout=5)
        for lease in list(self._held.values()):
            with contextlib.suppress(Exception):
                await self.leases.release(lease)
        await self._evidence.aclose()
        await self._taking.aclose()
        self._failures.close()

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
        # A wake that finds nothing to do (a duplicate, a late result event, news another
        # Brain already applied) writes nothing: it looks without a lease, so it costs
        # Redis nothing and consumes no fence, and the session's claimant keeps its own.
        looked = await self.runner.look(handle, holder_alive=self.holder_alive)
        if looked is not None:
            self.metrics.drive("idle")
            return await self._after(looked)
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
        self.metrics.drive("fenced" if report.fenced else "driven")
        return await self._after(report)

    async def _after(self, report: DriveReport) -> str:
        """What a drive (or a look) leaves to do: its timer's wake, its watch; then, a
        session that needs nothing until someone else acts is marked quiet, after its
        timer is queued (the audit leaves quiet sessions be: ``session_store.index``)."""
        self.reports.append(report)
        self.drives += 1
        if report.next_wake_at is not None and not report.fenced:
            # a delay, by the clock that set the due time: Redis adds it to its own
            after = report.next_wake_at - self.runner.services.clock()
            await self.wakes.wake(report.session_id, reason="timer", after=after)
        if report.awaiting and not report.fenced:
            await self.wakes.attention.watch(report.session_id, after=self.watch_after)
        if report.active and not report.fenced:
            await self._mark(report)
        return f"fence {report.fence}: {report.commits} commits, active={report.active}"

    async def _mark(self, report: DriveReport) -> None:
        """Mark the session quiet as this drive left it, or take a mark back: one made
        before this drive changed the session (blocked now, or news came meanwhile)."""
        index = self.runner.store.index
        try:
            if report.quiet and report.session_id not in self._again:
                await index.quiet(report.session_id, seq=report.seq)
            else:
                await index.unquiet(report.session_id)
        except BrainhandsError as error:  # a hint: the audit reads it anyway, that is all
            log.warning("session %s: quiet mark not written: %s", report.session_id, error)

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
                    lease = await self._extensions.extend(proof.lease)
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
