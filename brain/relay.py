"""The outbox relay: publish committed outbox messages on the bus.

Runs after the commit that recorded the messages (persist, then adopt); the drive then
records them as sent. Each message's id is its ``Nats-Msg-Id``, so publishing again
after a crash between publish and that record is dropped by the server inside its
duplicate window — and harmless after it, because executors act on the store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from bus import CANCEL_SUBJECT, Bus
from contracts import OutboxMessage
from runtime.crashpoints import CrashPoints

#: Topics every Hands instance hears at once (plain NATS): a cancellation must reach the
#: host whose container runs the operation.
BROADCAST_TOPICS = frozenset({CANCEL_SUBJECT})


class OutboxRelay:
    def __init__(self, bus: Bus, crash: CrashPoints) -> None:
        self.bus = bus
        self.crash = crash

    async def publish(self, messages: Sequence[OutboxMessage]) -> list[str]:
        """Publish each message (waiting for the stream's ack); the ids published.
        ``StoreUnavailable`` when the bus is away: nothing is lost, the outbox keeps
        every message until a later drive publishes it."""
        sent: list[str] = []
        for message in messages:
            self.crash.reached(f"relay:before_publish:{message.topic}")
            data = json.dumps(message.payload).encode()
            if message.topic in BROADCAST_TOPICS:  # to every listening Hands, no stream
                await self.bus.broadcast(message.topic, data)
            else:
                await self.bus.publish(message.topic, data, msg_id=message.id)
            self.crash.reached(f"relay:published:{message.topic}")
            sent.append(message.id)
        return sent
