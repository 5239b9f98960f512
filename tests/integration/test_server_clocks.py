"""Facts kept in Redis and NATS are compared on the server's clock, never on a host's
(invariant 17): each test plays a host whose wall clock is off (``tests.support.skew``)
while Redis and NATS keep theirs, and checks that nothing it decides or reports moves:
route advertisements, delayed wakes and the scheduler's timer, the wake backlog's age,
the wait of a wake, the dispatch backlog's age, the audit's slice of quiet sessions, and
the fleet page's Brain beats."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from bus import dispatch_subject
from bus.backlog import HANDS_CONSUMER, dispatch_backlog
from bus.jetstream import DISPATCH_STREAM
from coordination import redis_client
from coordination.wakes import RQWakes
from tests.support.services import require
from tests.support.skew import wall_clock_off_by
from tests.support.toolpath import scratch_bus

pytestmark = pytest.mark.redis

READER = "reader-token-0123456789abcdef"


@dataclass
class Redises:
    url: str
    prefix: str
    client: Redis
    wakes: RQWakes


@pytest.fixture
async def redis() -> AsyncIterator[Redises]:
    url = require("BH_REDIS_URL", "Redis")
    client = redis_client.connect(url)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    wakes = RQWakes(url, prefix=prefix)
    yield Redises(url, prefix, client, wakes)
    wakes.close()
    await client.aclose()


async def _served(r: Redises, route: str) -> bool:
    return {b.route: b.served for b in await r.wakes.backlog()}.get(route, False)


# -- the dispatch backlog's age ----------------------------------------------------------


@pytest.mark.nats
async def test_the_dispatch_backlog_age_is_the_nats_servers_time_since_publication() -> None:
    """Read by a host an hour ahead, a dispatch published now is seconds old — before the
    Hands' consumer exists and after (before: an hour)."""
    async with scratch_bus() as bus:
        await bus.publish(dispatch_subject("t"), b"{}", msg_id=uuid.uuid4().hex)
        with wall_clock_off_by(3600):
            unbound = await dispatch_backlog(bus)
        await bus.js.add_consumer(bus.stream(DISPATCH_STREAM), durable_name=HANDS_CONSUMER)
        with wall_clock_off_by(3600):
            bound = await dispatch_backlog(bus)
    assert unbound.pending == 1 and 0 <= unbound.oldest_age < 60
    assert bound.pending == 1 and 0 <= bound.oldest_age < 60
