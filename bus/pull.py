"""Taking messages off a durable pull consumer one at a time.

nats-py's ``fetch(n)`` for ``n > 1`` asks the server for a lingering pull of ``n``
messages and returns once it has some; a pull that got fewer than it asked stays open
on the server until it expires. The next message published goes to that older pull, and
the fetch waiting for it then reads it but returns only when that pull's expiry status
arrives. Measured on the tool path (``bench.warm``, docs/benchmarks.md): one warm no-op
call in four waited 300 to 400 ms for its dispatch or its result event, against 55 ms.
A pull of one message is over once it delivered it, so nothing lingers: the Hands and
the scheduler fetch one at a time (a round trip each, under a millisecond on loopback).
"""

from __future__ import annotations

from typing import Any

from nats.aio.msg import Msg


async def fetch_one(pull: Any, *, wait: float) -> list[Msg]:
    """The next message of ``pull`` (a nats-py pull subscription), waiting at most
    ``wait`` seconds: a list of one, or ``TimeoutError`` (nats-py's) when none came."""
    messages: list[Msg] = await pull.fetch(1, timeout=wait)
    return messages
