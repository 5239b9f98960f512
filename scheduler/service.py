"""The scheduler: turns results into wakes, fires due timers, and reconciles from the store.

* **Results → wakes.** A durable JetStream consumer of the results stream; each result
  event becomes a wake of its session, acked only after the wake is queued (a crash in
  between redelivers the event: a second wake is harmless).
* **Timers.** Delayed wakes (sleeping tasks, retry backoff) become wake jobs when due,
  and sessions whose lease lapsed unreleased are woken; the scheduler sleeps until the
  next of them is due, woken early by a Brain that adds an earlier one
  (``coordination.timer``), so an idle system costs Redis a few commands per 5 s.
* **Attention.** Sessions a Brain left waiting on the Hands come due in the attention
  set (``coordination.attention``); for each, the store's committed intents decide: a
  dispatch nobody answered is published again from the intent (a ``Nats-Msg-Id`` of its
  own, which the bus's duplicate window has not seen),
  a result whose event was lost wakes the session, and the session is looked at again
  while intents stay open. Losing all of NATS's data delays work and loses none; a pass
  costs in proportion to the sessions that need attention.
* **Collection.** Every ``collect_every`` (an hour) one scheduler of the fleet deletes
  the workspace blobs nothing retains (``scheduler.collection``).
* **Audit.** On start, when Redis lost the attention set, and every ``reconcile_every``
  (10 min), every active session of the store that no Brain holds is woken and every
  session with open intents is put in the attention set: whatever Redis or NATS lost —
  a wake, an unpublished outbox message (the drive relays it), a lease whose holder
  died — is found again from the store. The periodic audit leaves out the sessions a
  Brain marked quiet (waiting for a person, a child or a timer: ``session_store.index``)
  but for a rotating slice of them, so it costs what needs attention, not what waits.

Several schedulers may run at once without double effects: they share one durable
consumer (each result event goes to one of them), a due timer is popped atomically by
one of them, a pass of the reconciler is taken in turn (``scheduler.turns``: one pass
per period across all of them, plus one by each scheduler as it starts), and every
effect is a coalesced wake anyway — what a wake leads to is applied once by the store,
under the lease's fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
import zlib
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig
from pydantic import Field, ValidationError

from bus import RESULTS_STREAM, Bus, dispatch_subject
from bus.backlog import SCHEDULER_CONSUMER, dispatch_backlog, results_backlog
from bus.jetstream import RESULTS_SUBJECTS
from bus.pull import fetch_one
from contracts import BrainhandsError, OperationStatus
from contracts.fleet import SchedulerBeat
from contracts.model import Frozen, refusal_of
from contracts.tool import Dispatch, ResultEvent
from coordination.protocols import LeaseStore
from coordination.timer import Timer
from coordination.wakes import RQWakes
from runtime.cancellation import cancel_and_wait
from runtime.logs import log_context
from scheduler.collection import CollectionPass
from scheduler.turns import Turns
from session_store import SessionStore

log = logging.getLogger(__name__)

CONSUMER = SCHEDULER_CONSUMER
#: the least time the count of an operation's re-issues is kept after its last one
REISSUE_MEMORY = timedelta(hours=1)
#: the reconciler's turn lapses a little before the next period, so the scheduler that
#: took it can take it again on time
_TURN_SHARE = 0.9


class SchedulerSettings(Frozen):
    #: without a ``Timer``, due timers and lapsed leases are looked for this often;
    #: with one, the pause after a round that found some due
    timer_every: timedelta = timedelta(milliseconds=100)
    #: the audit of every active session (also on start and when Redis lost data)
    reconcile_every: timedelta | None = timedelta(minutes=10)
    #: how often due sessions of the attention set are looked at (None: never); they
    #: come due ``reissue_after`` (30 s) after a dispatch, so a look every 5 s is soon
    #: enough, and costs Redis little when nothing is due
    attend_every: timedelta | None = timedelta(seconds=5)
    #: an intent still open is looked at again (and its dispatch re-issued) this often
    reissue_after: timedelta = timedelta(seconds=30)
    ack_wait: timedelta = timedelta(seconds=30)
    #: between attempts to bind the results consumer (NATS away, stream missing)
    rebind_every: timedelta = timedelta(seconds=1)
    #: the periodic audit reads every quiet session once in this many periods (the audit
    #: on start and after Redis lost data reads them all)
    quiet_slices: int = Field(default=12, ge=1)
    #: how often this scheduler writes its beat (``session_store.fleet``: both streams'
    #: backlogs) for operators; None: never
    beat_every: timedelta | None = timedelta(seconds=10)
    #: how often one scheduler of the fleet collects the workspace blobs nothing
    #: retains (``scheduler.collection``); None: never
    collect_every: timedelta | None = timedelta(hours=1)


def new_scheduler_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Scheduler:
    def __init__(
        self,
        *,
        store: SessionStore,
        bus: Bus | None,
        wakes: RQWakes,
        leases: LeaseStore,
        turns: Turns | None = None,
        settings: SchedulerSettings | None = None,
        name: str | None = None,
        timer: Timer | None = None,
    ) -> None:
        """With ``turns``, a reconciler pass runs only when it is this scheduler's turn
        (several schedulers share one pass per period); without, every period. With
        ``timer``, due timers are waited for, not polled (``_timers``)."""
        self.timer = timer
        self.store = store
        self.bus = bus
        self.wakes = wakes
        self.leases = leases
        self.turns = turns
        self.settings = settings or SchedulerSettings()
        self.name = name or new_scheduler_id()
        #: wakes asked for, by cause: "result", "timer", "reconcile"
        self.woken: Counter[str] = Counter()
        #: reconciler passes this scheduler ran (not the ones it left to another's turn)
        self.passes = 0
        #: dispatches published again from the store's intents
        self.reissued = 0
        #: result events refused, by (door, reason): ``not_backed`` (the store holds no
        #: such result), ``invalid_id``, ``malformed`` (``refusals`` adds the other doors)
        self.refused: Counter[tuple[str, str]] = Counter()
        #: re-issues the bus dropped as duplicates (none, unless a message id repeats)
        self.duplicates = 0
        #: the periodic workspace collection, taken in turn with the other schedulers
        self.collection = CollectionPass(
            store,
            turns=turns,
            name=self.name,
            every=self.settings.collect_every or timedelta(hours=1),
        )
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Run the loops until ``shutdown``. A loop that dies of an unexpected
        error ends the run with that error (a supervisor restarts the process) rather
        than leaving a scheduler that silently stopped consuming results."""
        loops = [self._timers()]
        if self.bus is not None:
            loops.append(self._results(self.bus))
        if self.settings.reconcile_every is not None:
            loops.append(self._reconciling(self.settings.reconcile_every))
        if self.settings.attend_every is not None:
            loops.append(self._attending(self.settings.attend_every))
        if self.settings.beat_every is not None:
            loops.append(self._beating(self.settings.beat_every))
        if self.settings.collect_every is not None:
            loops.append(self.collection.run())
        tasks = [asyncio.create_task(loop) for loop in loops]
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            done, _ = await asyncio.wait({stopping, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopping}:
                task.result()  # the loops run forever: only an error ends one
        finally:
            await cancel_and_wait(stopping, *tasks)
            if self.settings.beat_every is not None:
                try:  # gone from the fleet page; one that dies leaves its beat, shown silent
                    await self.store.fleet.schedulers.leave(self.name)
                except BrainhandsError as error:
                    log.warning("could not remove this scheduler's beat: %s", error.message)

    async def shutdown(self) -> None:
        self._stopping.set()

    def refusals(self) -> Counter[tuple[str, str]]:
        """What each door refused, by (door, reason): result events (``results``), and
        members of the attention set (``attention``) and of the due set (``due``) that
        are not session ids."""
        found = Counter(self.refused)
        for door, refused in (
            ("attention", self.wakes.attention.refused),
            ("due", self.wakes.due_refused),
        ):
            for reason, count in refused.items():
                found[door, reason] += count
        return found

    async def beat(self) -> SchedulerBeat:
        """Write this scheduler's view of both streams' backlogs to the store (for the
        fleet page); a stream NATS did not answer for is left out of the beat."""
        dispatch = results = None
        if self.bus is not None:
            try:
                dispatch = (await dispatch_backlog(self.bus)).queue()
                results = (await results_backlog(self.bus)).queue()
            except Exception as error:  # NATS away: the beat says so (no backlogs)
                log.debug("backlogs not read: %s", error)
        every = self.settings.beat_every or timedelta(seconds=10)
        beat = SchedulerBeat(
            scheduler=self.name,
            process=f"{socket.gethostname()} pid {os.getpid()}",
            dispatch=dispatch,
            results=results,
            beat_at=self.store.clock.now(),
            every_seconds=every.total_seconds(),
        )
        await self.store.fleet.schedulers.beat(beat)
        return beat

    async def _beating(self, every: timedelta) -> None:
        with contextlib.suppress(Exception):
            await self.store.fleet.schedulers.forget()
        while True:
            try:
                await self.beat()
            except Exception as error:  # a missed beat shows as silent; nothing else
                log.warning("beat not written: %s", error)
            await asyncio.sleep(every.total_seconds())

    async def reconcile(self, *, full: bool = True) -> list[str]:
        """The audit: wake every active session no Brain holds, and put every session
        with open intents in the attention set; the sessions woken. A listed session
        that turns out finished (its drive was dropped before the index caught up) is
        swept from the index, not woken. Not ``full``, the sessions marked quiet are
        left out (they wait for a person, a child or a timer Redis holds:
        ``session_store.index``) but for this period's slice of them."""
        woken = []
        verify = None if full else await self.quiet_slice()
        async for session_id in self.store.active_sessions(verify=verify):
            handle = await self.store.session(session_id)
            if not handle.state.is_active:
                await self.store.sweep(session_id)
                continue
            if handle.state.intents:
                await self.wakes.attention.watch(session_id, after=timedelta(0))
            if await self.leases.holder(session_id) is None:
                await self.wakes.wake(session_id, reason="reconcile")
                woken.append(session_id)
        self.passes += 1
        self.woken["reconcile"] += len(woken)
        return woken

    async def quiet_slice(self) -> Callable[[str], bool]:
        """Which quiet sessions this audit reads anyway: one of ``quiet_slices`` by a
        hash of the id, the next one at each audit — counted in Redis across all
        schedulers (``Turns.count``), by this one alone without turns; no clock — so
        each quiet mark is checked once every ``quiet_slices`` audits and a stale one (a
        crash between a commit and taking the mark back) is found."""
        slices = self.settings.quiet_slices
        count = self.passes if self.turns is None else await self.turns.count("quiet-slice")
        turn = count % slices

        def verify(session_id: str) -> bool:
            return zlib.crc32(session_id.encode()) % slices == turn

        return verify

    async def attend(self) -> dict[str, int]:
        """Look at the sessions due in the attention set (see the module docstring);
        what was done, by kind: ``reissued``, ``duplicate`` (a re-issue the bus
        dropped), ``announced``, ``outbox``."""
        done: Counter[str] = Counter()
        for session_id in await self.wakes.attention.take():
            try:
                done.update(await self._attend(session_id))
            except BrainhandsError as error:  # look again later
                log.warning("attention to %s failed: %s", session_id, error.message)
                await self.wakes.attention.watch(session_id, after=self.settings.reissue_after)
        self.reissued += done["reissued"]
        return dict(done)

    async def _attend(self, session_id: str) -> Counter[str]:
        done: Counter[str] = Counter()
        state = (await self.store.session(session_id)).state
        wake = bool(state.outbox)  # committed, not relayed yet: the drive relays it
        done["outbox"] += len(state.outbox)
        open_intents = False
        for operation_id, intent in state.intents.items():
            if await self.store.get_operation_result(operation_id) is not None:
                wake = True  # its result event may be lost: the drive applies it
                done["announced"] += 1
                await self.wakes.attention.forget_reissues(operation_id)
                continue
            open_intents = True
            record = await self.store.get_operation(operation_id)
            if record is not None and record.status is OperationStatus.UNCERTAIN:
                continue  # an operator decides; the settle wakes the session
            if self.bus is not None:
                dispatch = intent.dispatch
                if dispatch.session_id != session_id:  # a fork's inherited call: its log
                    dispatch = dispatch.model_copy(update={"via": session_id})
                done["reissued" if await self._reissue(dispatch) else "duplicate"] += 1
        if wake:
            await self.wakes.wake(session_id, reason="attention")
        if open_intents:
            await self.wakes.attention.watch(session_id, after=self.settings.reissue_after)
        return done

    async def _reissue(self, dispatch: Dispatch) -> bool:
        """Publish the committed dispatch again, with a ``Nats-Msg-Id`` of its own: the
        original's (the operation id) and earlier re-issues' may still be in the
        server's duplicate window after the messages were lost (a purge, NATS's data
        gone), and a repeat would be dropped. The mark counts this operation's re-issues
        across all schedulers in Redis (``coordination.attention``). Every copy is the
        same operation: the Hands act on the store, so copies never run it twice.
        False (counted, logged) when the bus dropped it as a duplicate all the same."""
        op = dispatch.operation_id
        mark = await self.wakes.attention.reissue_mark(op, keep=self._reissue_memory())
        msg_id = f"{op}.reissue-{mark}"
        published = await self.bus.publish(dispatch_subject(dispatch.tool), dispatch, msg_id=msg_id)  # type: ignore[union-attr]
        if not published:
            self.duplicates += 1
            log.warning("re-issued dispatch %s was dropped by the bus as a duplicate", msg_id)
        return published

    def _reissue_memory(self) -> timedelta:
        """How long the count of an operation's re-issues outlives its last one: well
        past the bus's duplicate window (``_reissue``)."""
        window = self.bus.settings.duplicate_window if self.bus is not None else timedelta(0)
        return max(REISSUE_MEMORY, 2 * window)

    async def _attending(self, every: timedelta) -> None:
        first = True
        while True:
            try:
                lost = await self.wakes.attention.lost()
                # on start the audit loop (if any) audits already
                if lost and not (first and self.settings.reconcile_every is not None):
                    log.info("the attention set is new or was lost: auditing the store")
                    await self.reconcile()
                done = await self.attend()
                if done.get("reissued"):
                    log.info("re-issued %d dispatch(es) from the store", done["reissued"])
            except BrainhandsError as error:
                log.warning("attention: %s", error.message)
            first = False
            await asyncio.sleep(every.total_seconds())

    async def _reconciling(self, every: timedelta) -> None:
        first = True
        while True:
            try:
                if await self._my_turn(every, first=first):
                    woken = await self.reconcile(full=first)
                    if woken:
                        log.info("reconciler woke %d session(s)", len(woken))
            except BrainhandsError as error:
                log.warning("reconciling failed: %s", error.message)
            first = False
            await asyncio.sleep(every.total_seconds())

    async def _my_turn(self, every: timedelta, *, first: bool) -> bool:
        """Whether this scheduler runs this period's pass: always on start (claiming
        the turn, so the others skip theirs), then only when nobody took the turn."""
        if self.turns is None:
            return True
        hold = every * _TURN_SHARE
        if first:
            await self.turns.claim("reconcile", self.name, hold=hold)
            return True
        return await self.turns.take("reconcile", self.name, hold=hold)

    async def _timers(self) -> None:
        """Promote due delayed wakes and wake sessions whose lease lapsed. With a
        ``timer``, it sleeps until the next one is due (a Brain's signal cuts the sleep
        short: ``coordination.timer``) and costs a few Redis commands per
        ``LONGEST_WAIT`` when nothing is; without, it looks every ``timer_every``."""
        every = self.settings.timer_every.total_seconds()
        while True:
            try:
                if self.timer is not None:
                    wait = await self.timer.next_in()
                    if wait > 0:
                        await self.timer.wait(wait)
                        continue
                due = await self.wakes.promote_due()
                self.woken["timer"] += len(due)
                # a holder that died mid-drive: its session goes on now, not at the
                # next reconciler pass
                for session_id in await self.leases.lapsed():
                    await self.wakes.wake(session_id, reason="lease lapsed")
                    self.woken["lapsed"] += 1
            except BrainhandsError as error:
                log.warning("timers: %s", error.message)
            await asyncio.sleep(every)

    async def _results(self, bus: Bus) -> None:
        """Consume result events for as long as the scheduler runs. A consumer that
        cannot be bound (NATS away, its stream lost with NATS's data) or stops answering
        is bound again — the streams re-created first —, never given up."""
        failed = False  # Bus.connect created the streams; after a failure, again
        while True:
            try:
                if failed:
                    await bus.ensure_streams()
                pull = await self._consumer(bus)
            except (nats.errors.Error, OSError, BrainhandsError) as error:
                log.warning("results: cannot bind the consumer: %s; retrying", error)
                failed = True
                await asyncio.sleep(self.settings.rebind_every.total_seconds())
                continue
            try:
                await self._consume(pull)  # returns when fetching fails
            finally:
                failed = True
                with contextlib.suppress(nats.errors.Error, OSError):
                    await pull.unsubscribe()

    async def _consume(self, pull: Any) -> None:
        """Handle fetched events until fetching fails otherwise than by timing out."""
        while True:
            try:
                messages = await fetch_one(pull, wait=1)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except (nats.errors.Error, OSError) as error:
                log.warning("results: %s; binding the consumer again", error)
                await asyncio.sleep(self.settings.rebind_every.total_seconds())
                return
            for message in messages:
                await self._on_result(message)

    async def _on_result(self, message: Any) -> None:
        try:
            event = ResultEvent.model_validate_json(message.data)
        except ValidationError as error:  # it can never become valid: never redelivered
            reason, detail = refusal_of(error)
            self.refused["results", reason] += 1
            log.warning("refused a result event (%s): %s", reason, detail)
            with contextlib.suppress(nats.errors.Error):
                await message.term()
            return
        with log_context(session_id=event.session_id, operation_id=event.operation_id):
            await self._wake_for(message, event)

    async def _wake_for(self, message: Any, event: ResultEvent) -> None:
        try:
            if not await self._backed(event):
                self.refused["results", "not_backed"] += 1
                log.warning(
                    "result event for %s (session %s) refused: the store holds no such result",
                    event.operation_id,
                    event.session_id,
                )
                with contextlib.suppress(nats.errors.Error):
                    await message.term()
                return
            await self.wakes.wake(event.session_id, reason=f"result {event.operation_id}")
        except BrainhandsError as error:  # Redis or the store away: the event comes back
            log.warning("cannot wake %s yet: %s", event.session_id, error.message)
            with contextlib.suppress(nats.errors.Error):
                await message.nak(delay=1)
            return
        self.woken["result"] += 1
        with contextlib.suppress(nats.errors.Error):
            await message.ack()

    async def _backed(self, event: ResultEvent) -> bool:
        """Whether the store holds the result the event announces, for the session it
        names — the operation's own, or a fork whose log holds its intent (the store
        decides: a forged or foreign event wakes nobody)."""
        result = await self.store.get_operation_result(event.operation_id)
        if result is None:
            return False
        if result.session_id == event.session_id:
            return True
        return await self.store.intent(event.session_id, event.operation_id) is not None

    async def _consumer(self, bus: Bus) -> Any:
        config = ConsumerConfig(
            durable_name=CONSUMER,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.settings.ack_wait.total_seconds(),
            filter_subject=bus.subject(RESULTS_SUBJECTS),
        )
        return await bus.js.pull_subscribe(
            bus.subject(RESULTS_SUBJECTS),
            durable=CONSUMER,
            stream=bus.stream(RESULTS_STREAM),
            config=config,
        )
