"""The Hands service: pull dispatches from JetStream and run them, within a limit.

Any number of instances share one durable pull consumer of the work-queue stream. Each
fetches only while it has a free slot, one message at a time (admission control: a busy
instance leaves work in the stream for others instead of overloading itself; and a
fetch of several that got fewer holds the next message until its pull request expires,
``bus.pull``), keeps long runs
alive with in-progress acks, and acks only once the operation's result is in the store.
Deliveries are unlimited, with a backoff (2 s doubling to 60 s): running out of
deliveries never decides an outcome, and an outage of the engine, the store or NATS
delays work without spending the operation's attempts (those are counted on its record).
A dispatch the store does not back (no committed intent) is refused, counted and logged,
and changes nothing; so is a message that is not a dispatch or a cancellation at all
(not JSON, another shape, an id that is not an identifier): terminated, never
redelivered, logged once without a traceback. Any other error handling one message is
logged and counted (``loop_errors_total``) and the message comes back later. A consumer
that stops answering (NATS away, or its stream lost with NATS's data) is bound again —
the streams re-created first —, never given up. It also listens for cancellations,
reaps containers it owns (on start and periodically), and writes its beat to the store
for operators (``session_store.fleet``: its slots, operations, containers and the
dispatch backlog).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig
from pydantic import ValidationError

from bus import CANCEL_SUBJECT, DISPATCH_STREAM, DISPATCH_SUBJECTS, Bus, result_subject
from bus.backlog import HANDS_CONSUMER, dispatch_backlog
from bus.pull import fetch_one
from contracts import BrainhandsError, OperationMismatch
from contracts.fleet import HandsBeat, QueueBacklog
from contracts.model import Frozen, refusal_of
from contracts.tool import Cancellation, Dispatch, DispatchMode, ResultEvent
from hands.executor import Busy, Duplicate, Executor, NotCommitted, Publish
from runtime.cancellation import cancel_and_wait

log = logging.getLogger(__name__)

CONSUMER = HANDS_CONSUMER


class ConsumerSettings(Frozen):
    concurrency: int = 4
    ack_wait: timedelta = timedelta(seconds=30)
    #: -1: unlimited (running out of deliveries must never decide an outcome)
    max_deliver: int = -1
    retry_delay: timedelta = timedelta(seconds=2)
    #: the longest backoff between deliveries of one dispatch
    max_retry_delay: timedelta = timedelta(seconds=60)
    reap_every: timedelta = timedelta(seconds=60)
    #: between attempts to bind the dispatch consumer (NATS away, stream missing)
    rebind_every: timedelta = timedelta(seconds=1)
    #: while fetches come back empty, how often to ask whether the consumer still exists
    consumer_check: timedelta = timedelta(seconds=3)
    #: how often this Hands writes its beat (``session_store.fleet``) for operators
    beat_every: timedelta = timedelta(seconds=10)


class HandsService:
    """``async with HandsService(...) as hands: await hands.run()``; ``shutdown()``."""

    def __init__(self, *, bus: Bus, executor: Executor, settings: ConsumerSettings) -> None:
        self.bus = bus
        self.executor = executor
        self.settings = settings
        self._busy = 0
        self._consumer_checked = time.monotonic()
        self._freed = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._subscriptions: list[Any] = []
        self.handled = 0
        executor.metrics.slots(settings.concurrency, lambda: self._busy)

    async def __aenter__(self) -> HandsService:
        return self

    def checks(self) -> dict[str, Callable[[], Awaitable[object]]]:
        """What its readiness asks (``webapi.probes``): the store, NATS, the shared
        consumer, the engine."""
        return {
            "store": self.executor.store.backend.check,
            "nats": self.bus.check,
            "consumer": self._consumer_answers,
            "engine": self.executor.sandbox.check,
        }

    async def _consumer_answers(self) -> None:
        await self.bus.js.consumer_info(self.bus.stream(DISPATCH_STREAM), CONSUMER)

    async def __aexit__(self, *_: object) -> None:
        await self.shutdown()

    async def run(self) -> None:
        """Consume until ``shutdown``."""
        pull = await self._bind()
        if pull is None:
            return  # shut down before it was bound
        self._subscriptions.append(pull)
        self._subscriptions.append(await self.bus.listen(CANCEL_SUBJECT, self._on_cancel))
        reaper = asyncio.create_task(self._reap_periodically())
        beater = asyncio.create_task(self._beat_periodically())
        try:
            while not self._stopping.is_set():
                free = self.settings.concurrency - self._busy
                if free <= 0:  # full: leave the work in the stream for other instances
                    self._freed.clear()
                    await self._freed.wait()
                    continue
                messages = await self._fetch(pull)
                if messages is None or (not messages and await self._consumer_gone()):
                    pull = await self._rebind(pull)  # gone, or NATS away: bind again
                    continue
                for message in messages:
                    self._start(message)
        finally:
            await cancel_and_wait(reaper, beater)

    async def shutdown(self, graceful: timedelta = timedelta(seconds=10)) -> None:
        """Stop fetching; let running operations finish (or leave them to redelivery)."""
        self._stopping.set()
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        self._subscriptions.clear()
        if self._running:
            await asyncio.wait(set(self._running), timeout=graceful.total_seconds())
        await cancel_and_wait(*self._running)
        try:  # gone from the fleet page; a Hands that dies leaves its beat, shown silent
            await self.executor.store.fleet.leave(self.executor.executor_id)
        except Exception as error:
            log.warning("could not remove this Hands' beat: %s", error)

    async def _consumer(self) -> Any:
        config = ConsumerConfig(
            durable_name=CONSUMER,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.settings.ack_wait.total_seconds(),
            max_deliver=self.settings.max_deliver,
            max_ack_pending=-1,
            filter_subject=self.bus.subject(DISPATCH_SUBJECTS),
        )
        # Create or update: binding alone would keep the configuration an earlier version
        # made (e.g. 5 deliveries, then the message dropped) for as long as it exists.
        try:
            await self.bus.js.add_consumer(self.bus.stream(DISPATCH_STREAM), config)
        except nats.js.errors.Error as error:
            log.warning("cannot update the dispatch consumer's configuration: %s", error)
        return await self.bus.js.pull_subscribe(
            self.bus.subject(DISPATCH_SUBJECTS),
            durable=CONSUMER,
            stream=self.bus.stream(DISPATCH_STREAM),
            config=config,
        )

    async def _consumer_gone(self) -> bool:
        """Whether the dispatch consumer is gone (asked at most every ``consumer_check``
        while fetches come back empty): nats-py reads a deleted consumer's answers to a
        pull (409, 404) as "no messages yet", so a Hands whose consumer NATS lost (a
        restart without its data, an operator's delete) would otherwise wait forever."""
        now = time.monotonic()
        if now - self._consumer_checked < self.settings.consumer_check.total_seconds():
            return False
        self._consumer_checked = now
        try:
            await self.bus.js.consumer_info(self.bus.stream(DISPATCH_STREAM), CONSUMER)
        except nats.js.errors.NotFoundError:
            log.warning("the dispatch consumer is gone; binding it again")
            return True
        except (nats.errors.Error, OSError):
            return False  # NATS away: the next fetch says so
        return False

    async def _fetch(self, pull: Any) -> list[Msg] | None:
        """The next dispatch (or none within a second); None when fetching failed
        otherwise than by timing out (e.g. the server restarting, the consumer gone)."""
        try:
            return await fetch_one(pull, wait=1)
        except (TimeoutError, nats.errors.TimeoutError):
            return []
        except (nats.errors.Error, OSError) as error:
            log.warning("fetch failed (%s); binding the consumer again", error)
            await asyncio.sleep(self.settings.rebind_every.total_seconds())
            return None

    async def _bind(self) -> Any:
        """Bind the dispatch consumer, re-creating the streams first (NATS may have lost
        them with its data, or lose them while this starts), until it works; None once
        the service stops."""
        while not self._stopping.is_set():
            try:
                await self.bus.ensure_streams()
                return await self._consumer()
            except (nats.errors.Error, OSError, BrainhandsError) as error:
                log.warning("cannot bind the dispatch consumer (%s); retrying", error)
                await asyncio.sleep(self.settings.rebind_every.total_seconds())
        return None

    async def _rebind(self, stale: Any) -> Any:
        """Bind the dispatch consumer again (``_bind``) in place of ``stale``."""
        while not self._stopping.is_set():
            fresh = await self._bind()
            if fresh is None:
                break
            await _unsubscribe(stale)
            if self._stopping.is_set():  # shutdown already released the subscriptions
                await _unsubscribe(fresh)
            else:
                self._subscriptions[self._subscriptions.index(stale)] = fresh
            return fresh
        return stale

    def _start(self, message: Msg) -> None:
        self._busy += 1
        running = asyncio.create_task(self._handle(message))
        self._running.add(running)
        running.add_done_callback(self._running.discard)

    async def _handle(self, message: Msg) -> None:
        keepalive = asyncio.create_task(self._keep_alive(message))
        try:
            await self._process(message)
        finally:
            self._busy -= 1
            self._freed.set()
            self.handled += 1
            await cancel_and_wait(keepalive)

    async def _process(self, message: Msg) -> None:
        published = message.metadata.timestamp
        if message.metadata.num_delivered == 1 and published is not None:
            self.executor.metrics.delivered(time.time() - published.timestamp())
        try:
            dispatch = Dispatch.model_validate_json(message.data)
        except ValidationError as error:  # it can never become valid: never redelivered
            self._refuse("dispatch", error)
            await _settle_message(message.term())
            return
        try:
            await self.executor.handle(dispatch)
        except (NotCommitted, OperationMismatch) as refused:
            self.executor.metrics.refused("dispatch", refused.code)
            log.warning("%s: %s", dispatch.operation_id, refused.message)
            await _settle_message(message.term())
            return
        except Duplicate:
            await _settle_message(message.ack())  # the other delivery here brings it home
            return
        except Busy as busy:
            log.info("%s: %s", dispatch.operation_id, busy.message)
            await _settle_message(message.nak(delay=self._retry_delay(busy)))
            return
        except BrainhandsError as error:  # e.g. the store or the engine away: later
            log.warning(
                "%s: %s (%s); redelivering", dispatch.operation_id, error.message, error.code
            )
            await _settle_message(message.nak(delay=self._backoff(message)))
            return
        except Exception:  # a bug, or input nothing expected: the loop goes on
            self.executor.metrics.loop_error("handle")
            log.exception("%s: handling failed; redelivering", dispatch.operation_id)
            await _settle_message(message.nak(delay=self._backoff(message)))
            return
        self.executor.crash.reached("hands:before_ack")
        await _settle_message(message.ack())

    def _backoff(self, message: Msg) -> float:
        """``retry_delay`` doubling with each delivery, up to ``max_retry_delay``."""
        try:
            delivered = max(int(message.metadata.num_delivered or 1), 1)
        except (nats.errors.Error, AttributeError, ValueError):
            delivered = 1
        delay = self.settings.retry_delay.total_seconds() * float(2 ** min(delivered - 1, 16))
        return min(delay, self.settings.max_retry_delay.total_seconds())

    def _retry_delay(self, busy: Busy) -> float:
        delay = self.settings.retry_delay.total_seconds()
        if busy.until is not None:
            delay = (busy.until - self.executor.clock()).total_seconds() + 1
        return min(max(delay, self.settings.retry_delay.total_seconds()), 3600.0)

    async def _keep_alive(self, message: Msg) -> None:
        every = self.settings.ack_wait.total_seconds() / 3
        while True:
            await asyncio.sleep(every)
            await _settle_message(message.in_progress())

    def _refuse(self, kind: str, error: ValidationError) -> None:
        """A message that is not one (not JSON, another shape, a malformed id): counted
        and logged once, briefly — its input may be 10 kB of anything — and without a
        traceback (nothing here failed)."""
        reason, detail = refusal_of(error)
        self.executor.metrics.refused(kind, reason)
        log.warning("refused a %s message (%s): %s", kind, reason, detail)

    async def _on_cancel(self, message: Msg) -> None:
        try:
            cancellation = Cancellation.model_validate_json(message.data)
        except ValidationError as error:
            self._refuse("cancel", error)
            return
        try:
            await self.executor.honour_cancel(cancellation.operation_id)
        except BrainhandsError as error:
            log.warning("cancel %s: %s", cancellation.operation_id, error.message)

    async def beat(self) -> HandsBeat:
        """Write what this Hands is doing now to the store (for the fleet page):
        concurrency, its operations with their containers, the dispatch backlog."""
        executor = self.executor
        try:
            containers = {
                run.operation_id: run
                for run in await executor.sandbox.owned()
                if run.mode is DispatchMode.RUN and run.operation_id in executor.inflight
            }
        except BrainhandsError:  # the engine is away: the operations, without containers
            containers = {}
        running = []
        for operation in list(executor.inflight.values()):
            run = containers.get(operation.operation_id)
            if run is not None:
                operation = operation.model_copy(
                    update={"container": run.name, "state": run.state.value}
                )
            running.append(operation)
        try:
            queue: QueueBacklog | None = (await dispatch_backlog(self.bus)).queue()
        except Exception as error:  # NATS away: the beat says so (no queue)
            log.debug("dispatch backlog not read: %s", error)
            queue = None
        beat = HandsBeat(
            executor=executor.executor_id,
            process=f"{socket.gethostname()} pid {os.getpid()}",
            concurrency=self.settings.concurrency,
            running=tuple(running),
            queue=queue,
            beat_at=executor.clock(),
            every_seconds=self.settings.beat_every.total_seconds(),
        )
        await executor.store.fleet.beat(beat)
        return beat

    async def _beat_periodically(self) -> None:
        with contextlib.suppress(Exception):
            await self.executor.store.fleet.forget()
        while True:
            try:
                await self.beat()
            except Exception as error:  # a missed beat shows as silent; nothing else
                log.warning("beat not written: %s", error)
            await asyncio.sleep(self.settings.beat_every.total_seconds())

    async def _reap_periodically(self) -> None:
        while True:
            try:
                touched = await self.executor.reconcile()
                if touched:
                    log.info("reaped %d container(s): %s", len(touched), ", ".join(touched))
            except BrainhandsError as error:
                self.executor.metrics.loop_error("reaper")
                log.warning("reaping failed: %s", error.message)
            except Exception:  # one bad pass never stops the reaper
                self.executor.metrics.loop_error("reaper")
                log.exception("reaping failed")
            await asyncio.sleep(self.settings.reap_every.total_seconds())


def publisher(bus: Bus) -> Publish:
    """The executor's ``publish``: result events with ``Nats-Msg-Id`` = operation id and
    session (a fork that made an inherited call gets an event of its own)."""

    async def publish(event: ResultEvent) -> None:
        msg_id = f"{event.operation_id}:{event.session_id}"
        await bus.publish(result_subject(event.session_id), event, msg_id=msg_id)

    return publish


async def _unsubscribe(subscription: Any) -> None:
    with contextlib.suppress(nats.errors.Error, OSError, ValueError):
        await subscription.unsubscribe()


async def _settle_message(call: Any) -> None:
    """Ack/nak/term: the server may have gone or the message be already settled; the store
    holds the truth, so a lost ack only means a harmless redelivery."""
    with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError):
        await call
