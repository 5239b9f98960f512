"""``RedisLeases`` against a real Redis: fences, expiry, data loss, script loss, races.

Every test uses its own random key prefix and deletes its keys afterwards. The data-loss
test runs on the dedicated logical database 5 and empties it with ``FLUSHDB``
(``FLUSHALL`` would wipe every database of the shared server).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from contracts.errors import InvalidInput, LeaseLost, StoreUnavailable
from coordination import redis_client
from coordination.extensions import Extensions
from coordination.leases import RedisLeases
from coordination.protocols import Lease
from tests.support.eventually import assert_eventually
from tests.support.services import require

pytestmark = pytest.mark.redis

LONG = timedelta(seconds=30)
SHORT = timedelta(milliseconds=300)
LOSS_DB = 5  # emptied by FLUSHDB in the data-loss test; nothing else may live there


def on_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


class Rig(NamedTuple):
    leases: RedisLeases
    client: Redis  # the same client, for poking at Redis behind the leases' back


@asynccontextmanager
async def open_rig(url: str, **options: Any) -> AsyncIterator[Rig]:
    client = redis_client.connect(url, **options)
    leases = RedisLeases(client, prefix=f"bh-test-{uuid.uuid4().hex[:12]}")
    try:
        yield Rig(leases, client)
    finally:
        keys = [key async for key in client.scan_iter(match=f"{leases.prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture
async def redis_url() -> str:
    return require("BH_REDIS_URL", "Redis")


@pytest.fixture
async def rig(redis_url: str) -> AsyncIterator[Rig]:
    async with open_rig(redis_url) as opened:
        yield opened


@pytest.fixture
def leases(rig: Rig) -> RedisLeases:
    return rig.leases


async def test_fences_increase_and_a_failed_acquire_consumes_none(leases: RedisLeases) -> None:
    first = await leases.acquire("s1", "brain-a", ttl=LONG)
    assert first is not None and first.fence == 1
    assert await leases.acquire("s1", "brain-b", ttl=LONG) is None, "held by brain-a"
    assert await leases.acquire("s1", "brain-c", ttl=LONG) is None, "held by brain-a"
    assert await leases.holder("s1") == "brain-a"
    assert await leases.release(first) is True
    second = await leases.acquire("s1", "brain-b", ttl=LONG)
    assert second is not None
    assert second.fence == first.fence + 1, "the two refused acquires consumed no fence"
    assert await leases.release(second) is True
    third = await leases.acquire("s1", "brain-a", ttl=LONG)
    assert third is not None and third.fence == second.fence + 1
    other = await leases.acquire("s2", "brain-a", ttl=LONG)
    assert other is not None and other.fence == 1, "each session counts its own fences"


async def test_same_holder_reacquire_keeps_its_fence(rig: Rig) -> None:
    leases = rig.leases
    first = await leases.acquire("s1", "brain|7", ttl=SHORT)
    assert first is not None
    again = await leases.acquire("s1", "brain|7", ttl=LONG)
    assert again == first.model_copy(update={"ttl": LONG}), "same fence, new ttl"
    assert await leases.holder("s1") == "brain|7", "a '|' in the holder name is kept"
    ttl_ms = await rig.client.pttl(leases.lease_key("s1"))
    assert ttl_ms > SHORT / timedelta(milliseconds=1), "re-acquire extended the lease"


async def test_reacquire_below_the_floor_gets_a_fence_above_it(leases: RedisLeases) -> None:
    held = await leases.acquire("s1", "brain-a", ttl=LONG)
    assert held is not None and held.fence == 1
    kept = await leases.acquire("s1", "brain-a", ttl=LONG, floor=1)
    assert kept is not None and kept.fence == 1, "its own claim's fence is kept"
    raised = await leases.acquire("s1", "brain-a", ttl=LONG, floor=9)
    assert raised is not None and raised.fence == 10, "a fence the store outgrew is replaced"
    with pytest.raises(LeaseLost):
        await leases.extend(held)


async def test_the_claimant_of_the_stored_fence_gets_it_back_while_nobody_took_one_since(
    leases: RedisLeases,
) -> None:
    """A Brain that released a session it claimed at fence F and is woken for it again
    (a tool result 300 ms later) gets F back while no other acquire happened: it still
    holds the session in the store, so it writes no second claim. Any acquire since, or a
    counter that is not F, gives a new fence as before."""
    first = await leases.acquire("s1", "brain-a", ttl=LONG)
    assert first is not None and await leases.release(first)
    again = await leases.acquire("s1", "brain-a", ttl=LONG, floor=first.fence, claimed=True)
    assert again is not None and again.fence == first.fence
    assert await leases.acquire("s1", "brain-b", ttl=LONG) is None, "held again, by brain-a"
    assert await leases.release(again)

    other = await leases.acquire("s1", "brain-b", ttl=LONG, floor=first.fence)
    assert other is not None and other.fence == first.fence + 1
    assert await leases.release(other)  # brain-b took a fence and claimed nothing
    back = await leases.acquire("s1", "brain-a", ttl=LONG, floor=first.fence, claimed=True)
    assert back is not None and back.fence == first.fence + 2, "an acquire happened since"

    assert await leases.release(back)
    unclaimed = await leases.acquire("s1", "brain-a", ttl=LONG, floor=back.fence)
    assert unclaimed is not None and unclaimed.fence == back.fence + 1, "not the claimant"


async def test_extend_by_the_holder(rig: Rig) -> None:
    leases = rig.leases
    lease = await leases.acquire("s1", "brain-a", ttl=SHORT)
    assert lease is not None
    longer = await leases.extend(lease, ttl=LONG)
    assert longer.ttl == LONG and longer.fence == lease.fence
    assert await rig.client.pttl(leases.lease_key("s1")) > 1_000
    assert await leases.extend(longer) == longer


async def test_extend_after_expiry_raises_lease_lost(leases: RedisLeases) -> None:
    lease = await leases.acquire("s1", "brain-a", ttl=SHORT)
    assert lease is not None

    async def lapsed() -> bool:
        return await leases.holder("s1") is None

    await assert_eventually(lapsed, within=5)
    with pytest.raises(LeaseLost, match="lapsed") as lost:
        await leases.extend(lease)
    assert lost.value.details["fence"] == lease.fence
    assert await leases.release(lease) is False


async def test_expired_lease_goes_to_another_holder_with_a_larger_fence(
    leases: RedisLeases,
) -> None:
    first = await leases.acquire("s1", "brain-a", ttl=SHORT)
    assert first is not None
    assert await leases.acquire("s1", "brain-b", ttl=LONG) is None
    taken: list[int] = []

    async def taken_over() -> bool:
        lease = await leases.acquire("s1", "brain-b", ttl=LONG)
        if lease is not None:
            taken.append(lease.fence)
        return lease is not None

    await assert_eventually(taken_over, within=5)
    assert taken == [first.fence + 1], "the polls while brain-a held it consumed no fence"
    assert await leases.holder("s1") == "brain-b"


async def test_stale_lease_cannot_extend_or_release(rig: Rig) -> None:
    leases = rig.leases
    old = await leases.acquire("s1", "brain-a", ttl=SHORT)
    assert old is not None
    await rig.client.delete(leases.lease_key("s1"))  # as if it had lapsed
    new = await leases.acquire("s1", "brain-b", ttl=LONG)
    assert new is not None and new.fence > old.fence
    with pytest.raises(LeaseLost, match=f"taken by brain-b with fence {new.fence}") as lost:
        await leases.extend(old)
    assert lost.value.details["current_fence"] == new.fence
    assert await leases.release(old) is False
    assert await leases.holder("s1") == "brain-b", "the stale release deleted nothing"
    # Same holder name, older fence: still stale.
    again = await leases.acquire("s1", "brain-b", ttl=LONG)
    assert again == new
    stale = new.model_copy(update={"fence": new.fence - 1})
    assert await leases.release(stale) is False
    with pytest.raises(LeaseLost):
        await leases.extend(stale)
    assert await leases.release(new) is True
    assert await leases.release(new) is False, "already released"
    assert await leases.holder("s1") is None


async def test_data_loss_reseeds_fences_above_the_floor(redis_url: str) -> None:
    async with open_rig(on_db(redis_url, LOSS_DB)) as (leases, client):
        fences = []
        for holder in ("brain-a", "brain-b", "brain-c"):
            lease = await leases.acquire("s1", holder, ttl=LONG)
            assert lease is not None
            fences.append(lease.fence)
            await leases.release(lease)
        high_water = fences[-1]
        assert fences == [1, 2, 3]
        await client.flushdb()  # Redis lost everything (restart without persistence)
        assert await leases.holder("s1") is None
        after = await leases.acquire("s1", "brain-d", ttl=LONG, floor=high_water)
        assert after is not None and after.fence == high_water + 1
        await leases.release(after)
        nxt = await leases.acquire("s1", "brain-e", ttl=LONG, floor=high_water)
        assert nxt is not None and nxt.fence == high_water + 2, "counter was re-seeded"
        await leases.release(nxt)
        lower = await leases.acquire("s1", "brain-f", ttl=LONG, floor=1)
        assert lower is not None and lower.fence == high_water + 3, "a lower floor never lowers"


async def test_script_flush_does_not_break_any_operation(rig: Rig) -> None:
    """After a Redis restart the cached script SHAs are gone (NOSCRIPT); the registered
    scripts load themselves again on first use."""
    leases, client = rig
    warm = await leases.acquire("s0", "brain-a", ttl=LONG)
    assert warm is not None
    assert await leases.extend(warm) == warm
    assert await leases.release(warm) is True

    await client.script_flush()
    lease = await leases.acquire("s1", "brain-a", ttl=LONG)
    assert lease is not None and lease.fence == 1
    await client.script_flush()
    assert await leases.acquire("s1", "brain-b", ttl=LONG) is None
    await client.script_flush()
    assert await leases.extend(lease, ttl=LONG) == lease
    await client.script_flush()
    assert await leases.holder("s1") == "brain-a"
    assert await leases.release(lease) is True
    await client.script_flush()
    assert await leases.release(lease) is False
    await client.script_flush()
    with pytest.raises(LeaseLost):
        await leases.extend(lease)


async def test_concurrent_acquires_have_exactly_one_winner(leases: RedisLeases) -> None:
    results = await asyncio.gather(
        *(leases.acquire("hot", f"brain-{n}", ttl=LONG) for n in range(20))
    )
    winners = [lease for lease in results if lease is not None]
    assert len(winners) == 1
    assert winners[0].fence == 1
    assert await leases.holder("hot") == winners[0].holder
    assert await leases.release(winners[0])
    nxt = await leases.acquire("hot", "brain-late", ttl=LONG)
    assert nxt is not None and nxt.fence == 2, "the 19 losers consumed no fence"


async def test_decoded_responses_client(redis_url: str) -> None:
    async with open_rig(redis_url, decode_responses=True) as (leases, _):
        lease = await leases.acquire("s1", "brain-a", ttl=LONG)
        assert lease is not None
        assert await leases.acquire("s1", "brain-b", ttl=LONG) is None
        assert await leases.holder("s1") == "brain-a"
        assert await leases.extend(lease) == lease
        assert await leases.release(lease) is True


async def test_redis_errors_become_store_unavailable(rig: Rig) -> None:
    leases = rig.leases
    await rig.client.hset(leases.lease_key("s1"), "not", "a string")  # WRONGTYPE
    with pytest.raises(StoreUnavailable, match="ResponseError"):
        await leases.acquire("s1", "brain-a", ttl=LONG)
    with pytest.raises(StoreUnavailable):
        await leases.holder("s1")

    # No retries: the client's own retry policy would only make this test slower.
    unreachable = Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    try:
        with pytest.raises(StoreUnavailable, match="ConnectionError") as failed:
            await RedisLeases(unreachable).acquire("s1", "brain-a", ttl=LONG)
        assert failed.value.retryable
    finally:
        await unreachable.aclose()


async def test_bad_input_is_refused_clearly(rig: Rig) -> None:
    leases = rig.leases
    with pytest.raises(InvalidInput, match="at least 1 ms"):
        await leases.acquire("s1", "brain-a", ttl=timedelta(0))
    with pytest.raises(InvalidInput, match="floor"):
        await leases.acquire("s1", "brain-a", ttl=LONG, floor=-1)
    with pytest.raises(InvalidInput, match="holder"):
        await leases.acquire("s1", "", ttl=LONG)
    with pytest.raises(InvalidInput, match="prefix"):
        RedisLeases(rig.client, prefix="")
    assert await leases.holder("s1") is None, "nothing was written"


async def test_a_lease_that_lapses_unreleased_is_reported_once(redis_url: str) -> None:
    """A holder that died (or froze) leaves its lease to lapse: the scheduler learns of
    it right after, once across all schedulers asking; released and extended leases,
    and a lapse whose session another holder took meanwhile, are not reported."""
    async with open_rig(redis_url) as one, open_rig(redis_url) as _:
        leases = one.leases
        other = RedisLeases(one.client, prefix=leases.prefix)  # a second scheduler
        dead = await leases.acquire("dead", "brain-a", ttl=SHORT)
        kept = await leases.acquire("kept", "brain-a", ttl=SHORT)
        given = await leases.acquire("given", "brain-a", ttl=SHORT)
        taken = await leases.acquire("taken", "brain-a", ttl=SHORT)
        assert dead and kept and given and taken
        assert await leases.lapsed() == []
        await leases.release(given)
        await asyncio.sleep(SHORT.total_seconds() / 2)
        await leases.extend(kept, ttl=LONG)
        await asyncio.sleep(SHORT.total_seconds() / 2 + 0.1)
        assert await leases.acquire("taken", "brain-b", ttl=LONG) is not None
        found = await asyncio.gather(leases.lapsed(), other.lapsed())
        assert sorted(found[0] + found[1]) == ["dead"], found
        assert await leases.lapsed() == [] and await other.lapsed() == []


async def test_extensions_due_together_go_to_redis_in_one_round_trip(rig: Rig) -> None:
    """A burst of drives keeping their leases (``coordination.extensions``): the
    extensions asked for in one turn of the loop are one pipeline; each drive hears its
    own lease's fate — extended, or lost to a release behind its back."""
    leases = rig.leases
    held = [await leases.acquire(f"s{n}", "brain-a", ttl=SHORT) for n in range(50)]
    assert all(lease is not None for lease in held)
    kept = [lease for lease in held if lease is not None]
    await leases.release(kept[7])  # gone: its drive must hear LeaseLost
    sent: list[int] = []
    batched = leases.extend_many

    async def counting(batch: Sequence[Lease], *, ttl: timedelta) -> list[Lease | LeaseLost]:
        sent.append(len(batch))
        return await batched(batch, ttl=ttl)

    leases.extend_many = counting  # type: ignore[method-assign]
    extensions = Extensions(leases, ttl=LONG)
    results = await asyncio.gather(
        *(extensions.extend(lease) for lease in kept), return_exceptions=True
    )
    assert sent == [50], "one round trip for the burst"
    assert isinstance(results[7], LeaseLost)
    assert all(r.ttl == LONG for n, r in enumerate(results) if n != 7)  # type: ignore[union-attr]
    assert await rig.client.pttl(leases.lease_key("s0")) > 1_000
