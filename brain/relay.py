"""The outbox relay: publish committed outbox messages on the bus.

Runs after the commit that recorded the messages (persist, then adopt); the drive then
records them as sent. Each message's id is its ``Nats-Msg-Id``, so publishing again
after a crash between publish and that record is dropped by the server inside its
duplicate window — and harmless after it, because executors act on the store.

A cancellation is recorded on its operation in the store *before* it is broadcast
(``lifecycle.cancellation``): a Hands checks the store before it starts a run and honours
a broadcast only when the store records it, so a queued dispatch never starts after its
task was cancelled, and the broadcast only shortens the wait of a running one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from bus import CANCEL_SUBJECT, Bus
from contracts import OutboxMessage
from contracts.tool import Cancellation
from lifecycle.cancellation import CancelTarget, record_cancel
from runtime.crashpoints import CrashPoints
from session_store import SessionStore

#: Topics every Hands instance hears at once (plain NATS): a cancellation must reach the
#: host whose container runs the operation.
BROADCAST_TOPICS = frozenset({CANCEL_SUBJECT})


class OutboxRelay:
    def __init__(self, bus: Bus, crash: CrashPoints, store: SessionStore) -> None:
        self.bus = bus
        self.crash = crash
        self.store = store

    async def publish(self, messages: Sequence[OutboxMessage]) -> list[str]:
        """Publish each message (waiting for the stream's ack); the ids published.
        ``StoreUnavailable`` when the bus is away: nothing is lost, the outbox keeps
        every message until a later drive publishes it."""
        sent: list[str] = []
        for message in messages:
            self.crash.reached(f"relay:before_publish:{message.topic}")
            data = json.dumps(message.payload).encode()
            if message.topic == CANCEL_SUBJECT:
                await self._record_cancel(Cancellation.model_validate(message.payload))
            if message.topic in BROADCAST_TOPICS:  # to every listening Hands, no stream
                await self.bus.broadcast(message.topic, data)
            else:
                await self.bus.publish(message.topic, data, msg_id=message.id)
            self.crash.reached(f"relay:published:{message.topic}")
            sent.append(message.id)
        return sent

    async def _record_cancel(self, cancellation: Cancellation) -> None:
        await record_cancel(
            self.store,
            cancellation.operation_id,
            cancellation.reason,
            by=f"brain (session {cancellation.session_id})",
            target=CancelTarget(
                session_id=cancellation.session_id,
                task_id=cancellation.task_id,
                tool=cancellation.tool,
            ),
        )
        self.crash.reached("relay:cancel_recorded")
