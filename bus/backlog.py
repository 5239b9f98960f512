"""The backlog of a stream's durable consumer, read from JetStream: how many messages wait
for it, how many it holds unacknowledged, and how long the oldest of them has been there.

Two are read: the dispatch work queue (the Hands' shared consumer) and the results
stream (the schedulers' shared consumer). Both the Hands and the scheduler report the
dispatch backlog (the scheduler runs when no Hands does, so an autoscaler can scale the
Hands from zero); the scheduler reports the results backlog (results no wake has been
asked for yet: Brains apply nothing of them until it is worked off). Ages compare the
server's publish timestamp with this host's clock: a scaling signal, never a decision.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Final

import nats.js.errors

from bus.jetstream import DISPATCH_STREAM, RESULTS_STREAM, Bus
from contracts.fleet import QueueBacklog

#: The durable consumer every Hands shares (``hands.service`` binds it).
HANDS_CONSUMER: Final = "hands"
#: The durable consumer every scheduler shares (``scheduler.service`` binds it).
SCHEDULER_CONSUMER: Final = "scheduler"


@dataclass(frozen=True)
class Backlog:
    #: messages not yet delivered to the consumer
    pending: float
    #: delivered, not yet acknowledged
    ack_pending: float
    #: seconds since the oldest message not yet acknowledged was published (0: none)
    oldest_age: float

    def queue(self) -> QueueBacklog:
        """As a beat carries it (an age the server gave no timestamp for: 0)."""
        age = 0.0 if math.isnan(self.oldest_age) else max(self.oldest_age, 0.0)
        return QueueBacklog(
            pending=int(self.pending), ack_pending=int(self.ack_pending), oldest_age_seconds=age
        )


async def dispatch_backlog(bus: Bus) -> Backlog:
    """The dispatch work queue, as the Hands' consumer has it."""
    return await _read(bus, DISPATCH_STREAM, HANDS_CONSUMER)


async def results_backlog(bus: Bus) -> Backlog:
    """The results stream, as the schedulers' consumer has it."""
    return await _read(bus, RESULTS_STREAM, SCHEDULER_CONSUMER)


async def _read(bus: Bus, name: str, consumer: str) -> Backlog:
    """Before the consumer exists, every message of the stream waits for it. Its oldest
    unacknowledged message is the first after its ack floor (acknowledged dispatches
    are removed from the work queue; results stay until the stream's limits drop them)."""
    stream = bus.stream(name)
    try:
        info = await bus.js.consumer_info(stream, consumer)
    except nats.js.errors.NotFoundError:
        state = (await bus.js.stream_info(stream)).state
        oldest = await _age(bus, stream, state.first_seq) if state.messages else 0.0
        return Backlog(float(state.messages), 0.0, oldest)
    pending, ack_pending = float(info.num_pending or 0), float(info.num_ack_pending or 0)
    if not pending and not ack_pending:
        return Backlog(0.0, 0.0, 0.0)
    floor = info.ack_floor.stream_seq if info.ack_floor and info.ack_floor.stream_seq else 0
    return Backlog(pending, ack_pending, await _age(bus, stream, floor + 1))


async def _age(bus: Bus, stream: str, seq: int) -> float:
    """Seconds since the first message at or after ``seq`` was published, by the server's
    timestamp and this host's clock (0: none left; NaN: no timestamp)."""
    try:
        first = await bus.js.get_msg(stream, seq=max(seq, 1), next=True)
    except nats.js.errors.NotFoundError:
        return 0.0  # taken meanwhile
    if first.time is None:
        return math.nan
    return max(0.0, time.time() - first.time.timestamp())
