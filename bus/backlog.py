"""The dispatch work queue's backlog, read from JetStream: how many dispatches wait, how
many are in flight, and how long the oldest one has been there.

Both the Hands (their own queue) and the scheduler (which runs when no Hands does, so an
autoscaler can scale the Hands from zero) report it. Ages compare the server's publish
timestamp with this host's clock: a scaling signal, never a decision.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Final

import nats.js.errors

from bus.jetstream import DISPATCH_STREAM, Bus

#: The durable consumer every Hands shares (``hands.service`` binds it).
HANDS_CONSUMER: Final = "hands"


@dataclass(frozen=True)
class DispatchBacklog:
    #: dispatches not yet delivered to any Hands
    pending: float
    #: delivered to a Hands, not yet acknowledged
    ack_pending: float
    #: seconds since the oldest dispatch still in the queue was published (0: empty)
    oldest_age: float

    @classmethod
    async def read(cls, bus: Bus) -> DispatchBacklog:
        pending, ack_pending = await _depth(bus)
        return cls(pending, ack_pending, await _oldest_age(bus))


async def _depth(bus: Bus) -> tuple[float, float]:
    """(pending, ack pending) of the shared consumer; before any Hands created it, every
    message in the work-queue stream is pending."""
    stream = bus.stream(DISPATCH_STREAM)
    try:
        info = await bus.js.consumer_info(stream, HANDS_CONSUMER)
    except nats.js.errors.NotFoundError:
        stream_info = await bus.js.stream_info(stream)
        return float(stream_info.state.messages), 0.0
    return float(info.num_pending or 0), float(info.num_ack_pending or 0)


async def _oldest_age(bus: Bus) -> float:
    """Seconds since the first message of the work-queue stream (acknowledged dispatches
    are removed from it, so the first one is the oldest waiting or in flight) was
    published, by the server's timestamp and this host's clock."""
    stream = bus.stream(DISPATCH_STREAM)
    state = (await bus.js.stream_info(stream)).state
    if not state.messages:
        return 0.0
    try:
        first = await bus.js.get_msg(stream, seq=state.first_seq, next=True)
    except nats.js.errors.NotFoundError:
        return 0.0  # taken meanwhile
    if first.time is None:
        return math.nan
    return max(0.0, time.time() - first.time.timestamp())
