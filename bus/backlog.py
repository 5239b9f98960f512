"""The backlog of a stream's durable consumer, read from JetStream: how many messages wait
for it, how many it holds unacknowledged, and how long the oldest of them has been there.

Two are read: the dispatch work queue (the Hands' shared consumer) and the results
stream (the schedulers' shared consumer). Both the Hands and the scheduler report the
dispatch backlog (the scheduler runs when no Hands does, so an autoscaler can scale the
Hands from zero); the scheduler reports the results backlog (results no wake has been
asked for yet: Brains apply nothing of them until it is worked off).

Ages are the server's own: the stream's ``STREAM.INFO`` answer carries the server's time
(``ts``; nats-py drops it, so the request is made raw here), and a message's time is
the one the server stamped it with. In a cluster both come from the stream's leader
(which stamps its messages), so this host's clock plays no part (invariant 17). A
server too old to send ``ts`` gives no age (NaN: 0 in a beat).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import nats.errors
import nats.js.errors

from bus.jetstream import DISPATCH_STREAM, RESULTS_STREAM, Bus
from contracts.fleet import QueueBacklog

#: The durable consumer every Hands shares (``hands.service`` binds it).
HANDS_CONSUMER: Final = "hands"
#: The durable consumer every scheduler shares (``scheduler.service`` binds it).
SCHEDULER_CONSUMER: Final = "scheduler"
#: the JetStream API's subject prefix (``Bus`` uses nats-py's default) and its timeout
_API: Final = "$JS.API"
_API_TIMEOUT_S: Final = 5.0


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
    answer = await _stream_info(bus, stream)
    now, state = _moment(answer.get("ts")), answer.get("state") or {}
    try:
        info = await bus.js.consumer_info(stream, consumer)
    except nats.js.errors.NotFoundError:
        messages = float(state.get("messages") or 0)
        oldest = _since(_moment(state.get("first_ts")), now) if messages else 0.0
        return Backlog(messages, 0.0, oldest)
    pending, ack_pending = float(info.num_pending or 0), float(info.num_ack_pending or 0)
    if not pending and not ack_pending:
        return Backlog(0.0, 0.0, 0.0)
    floor = info.ack_floor.stream_seq if info.ack_floor and info.ack_floor.stream_seq else 0
    return Backlog(pending, ack_pending, await _age(bus, stream, floor + 1, now))


async def _stream_info(bus: Bus, stream: str) -> dict[str, Any]:
    """The server's raw ``STREAM.INFO`` answer (with ``ts``), its errors raised as
    nats-py raises them (``NotFoundError``...)."""
    try:
        reply = await bus.nc.request(f"{_API}.STREAM.INFO.{stream}", b"", timeout=_API_TIMEOUT_S)
    except nats.errors.NoRespondersError:
        raise nats.js.errors.ServiceUnavailableError from None
    answer: dict[str, Any] = json.loads(reply.data)
    if "error" in answer:
        nats.js.errors.APIError.from_error(answer["error"])  # raises
    return answer


async def _age(bus: Bus, stream: str, seq: int, now: float) -> float:
    """Seconds from the server's stamp on the first message at or after ``seq`` to
    ``now``, the server's time (0: none left; NaN: no timestamp)."""
    try:
        first = await bus.js.get_msg(stream, seq=max(seq, 1), next=True)
    except nats.js.errors.NotFoundError:
        return 0.0  # taken meanwhile
    return _since(first.time.timestamp() if first.time is not None else math.nan, now)


def _since(then: float, now: float) -> float:
    """``now - then`` (both the server's clock), at least 0; NaN if either is unknown."""
    return max(0.0, now - then) if not (math.isnan(then) or math.isnan(now)) else math.nan


def _moment(stamp: object) -> float:
    """An RFC 3339 time of the server's (nanoseconds allowed) in seconds; NaN if absent."""
    if not isinstance(stamp, str):
        return math.nan
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return math.nan
