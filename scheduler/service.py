"""The scheduler: turns results into wakes, fires due timers, and reconciles from the store.

* **Results → wakes.** A durable JetStream consumer of the results stream; each result
  event becomes a wake of its session, acked only after the wake is queued (a crash in
  between redelivers the event: a second wake is harmless).
* **Timers.** Delayed wakes (sleeping tasks, retry backoff) become wake jobs when due.
* **Reconciler.** On start and periodically, every active session of the store that no
  Brain holds is woken: whatever Redis or NATS lost — a wake, an unpublished outbox
  message (the drive relays it), a lease whose holder died — is found again from the
  store. Several schedulers may run at once: every effect is a coalesced wake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig
from pydantic import ValidationError

from bus import RESULTS_STREAM, Bus
from bus.jetstream import RESULTS_SUBJECTS
from contracts import BrainhandsError
from contracts.model import Frozen
from contracts.tool import ResultEvent
from coordination.protocols import LeaseStore
from coordination.wakes import RQWakes
from session_store import SessionStore

log = logging.getLogger(__name__)

CONSUMER = "scheduler"


class SchedulerSettings(Frozen):
    timer_every: timedelta = timedelta(milliseconds=250)
    reconcile_every: timedelta | None = timedelta(seconds=30)
    ack_wait: timedelta = timedelta(seconds=30)


class Scheduler:
    def __init__(
        self,
        *,
        store: SessionStore,
        bus: Bus | None,
        wakes: RQWakes,
        leases: LeaseStore,
        settings: SchedulerSettings | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.wakes = wakes
        self.leases = leases
        self.settings = settings or SchedulerSettings()
        self.woken = 0
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Run the three loops until ``shutdown``."""
        loops = [self._timers()]
        if self.bus is not None:
            loops.append(self._results(self.bus))
        if self.settings.reconcile_every is not None:
            loops.append(self._reconciling(self.settings.reconcile_every))
        tasks = [asyncio.create_task(loop) for loop in loops]
        try:
            await self._stopping.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def shutdown(self) -> None:
        self._stopping.set()

    async def reconcile(self) -> list[str]:
        """Wake every active session no Brain holds; the sessions woken."""
        woken = []
        async for session_id in self.store.active_sessions():
            if await self.leases.holder(session_id) is None:
                await self.wakes.wake(session_id, reason="reconcile")
                woken.append(session_id)
        self.woken += len(woken)
        return woken

    async def _reconciling(self, every: timedelta) -> None:
        while True:
            try:
                woken = await self.reconcile()
                if woken:
                    log.info("reconciler woke %d session(s)", len(woken))
            except BrainhandsError as error:
                log.warning("reconciling failed: %s", error.message)
            await asyncio.sleep(every.total_seconds())

    async def _timers(self) -> None:
        while True:
            try:
                due = await self.wakes.promote_due()
                self.woken += len(due)
            except BrainhandsError as error:
                log.warning("timers: %s", error.message)
            await asyncio.sleep(self.settings.timer_every.total_seconds())

    async def _results(self, bus: Bus) -> None:
        pull = await self._consumer(bus)
        try:
            while True:
                try:
                    messages = await pull.fetch(32, timeout=1)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                except (nats.errors.Error, OSError) as error:
                    log.warning("results: %s; retrying", error)
                    await asyncio.sleep(0.5)
                    continue
                for message in messages:
                    await self._on_result(message)
        finally:
            with contextlib.suppress(nats.errors.Error, OSError):
                await pull.unsubscribe()

    async def _on_result(self, message: Any) -> None:
        try:
            event = ResultEvent.model_validate_json(message.data)
        except ValidationError:
            log.error("dropping a malformed result event")
            await message.term()
            return
        try:
            await self.wakes.wake(event.session_id, reason=f"result {event.operation_id}")
        except BrainhandsError as error:  # Redis away: the event comes back
            log.warning("cannot wake %s yet: %s", event.session_id, error.message)
            with contextlib.suppress(nats.errors.Error):
                await message.nak(delay=1)
            return
        self.woken += 1
        with contextlib.suppress(nats.errors.Error):
            await message.ack()

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
