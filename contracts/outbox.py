"""Outbox messages: bus messages recorded in a commit and sent only after it landed."""

from __future__ import annotations

from pydantic import JsonValue

from contracts.model import Frozen, Identifier


class OutboxMessage(Frozen):
    """A message to publish on ``topic``; ``id`` doubles as the bus de-duplication key."""

    id: Identifier
    topic: str
    payload: JsonValue = None
