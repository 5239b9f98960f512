"""The wake backlog: how many wakes wait for each Brain route, since when, and whether
any Brain serves the route — the Brains' scaling and alerting signal.

Read from Redis without any Brain running (an autoscaler must be able to scale from
zero): the wake queues are RQ lists ``rq:queue:<prefix>-wakes-<route>``, listed in RQ's
``rq:queues`` set; the oldest job is the list's head (RQ pushes at the tail and pops the
head) and its hash holds ``bh_enqueued``, Redis's clock at the enqueue
(``coordination.wakes``). The age is Redis's clock now minus that: no host's clock plays
a part (invariant 17). A job queued by an older build has only RQ's ``enqueued_at``, its
enqueuer's clock: its age is read against Redis's clock, good to the two clocks'
agreement. A route is *served* while a Brain's advertisement of it is live on Redis's
clock (``coordination.routes``); a backlog on a route nobody serves does not shrink by
adding Brains of the running build: it should page.
"""

from __future__ import annotations

from datetime import UTC, datetime

import redis

from contracts.model import Frozen
from coordination.routes import live_at

#: the job hash's field holding Redis's clock at the enqueue (``coordination.wakes``)
ENQUEUED_FIELD = "bh_enqueued"
_QUEUES = "rq:queues"
_QUEUE_KEY = "rq:queue:"


class RouteBacklog(Frozen):
    route: str
    #: wake jobs waiting in the route's queue
    waiting: int
    #: seconds since the oldest waiting job was enqueued (0 when none waits)
    oldest_age_s: float
    #: a live Brain advertisement names the route
    served: bool


def wake_backlog(client: redis.Redis, prefix: str) -> list[RouteBacklog]:
    """Every route of ``prefix`` that has a wake queue or a live advertisement."""
    head = f"{_QUEUE_KEY}{prefix}-wakes-"
    with client.pipeline(transaction=False) as pipe:
        pipe.smembers(_QUEUES)
        pipe.hgetall(f"{prefix}:routes")
        pipe.time()
        members, advertised, (seconds, micros) = pipe.execute()
    now = seconds + micros / 1e6
    queues = sorted(name for name in (_text(raw) for raw in members) if name.startswith(head))
    served = set(live_at(advertised, now))
    routes = sorted({name.removeprefix(head) for name in queues} | served)
    with client.pipeline(transaction=False) as pipe:
        for route in routes:
            pipe.llen(head + route)
            pipe.lindex(head + route, 0)
        answers = pipe.execute()
    found: list[RouteBacklog] = []
    heads: dict[str, str] = {}
    for index, route in enumerate(routes):
        waiting, first = int(answers[2 * index] or 0), answers[2 * index + 1]
        if waiting and first is not None:
            heads[route] = _text(first)
        found.append(RouteBacklog(route=route, waiting=waiting, oldest_age_s=0.0, served=False))
    ages = _ages(client, heads, now)
    return [
        b.model_copy(update={"oldest_age_s": ages.get(b.route, 0.0), "served": b.route in served})
        for b in found
    ]


def _ages(client: redis.Redis, heads: dict[str, str], now: float) -> dict[str, float]:
    """Seconds since each head job was enqueued, by Redis's clock ``now`` (a job gone
    meanwhile: 0)."""
    with client.pipeline(transaction=False) as pipe:
        for job in heads.values():
            pipe.hmget(f"rq:job:{job}", [ENQUEUED_FIELD, "enqueued_at"])
        stamps = pipe.execute()
    ages = {}
    for route, (stamp, rq_stamp) in zip(heads, stamps, strict=True):
        at = enqueued(stamp) or _moment(rq_stamp)
        ages[route] = max(0.0, now - at) if at is not None else 0.0
    return ages


def enqueued(stamp: bytes | str | None) -> float | None:
    """A job's ``bh_enqueued`` stamp (Redis's clock, seconds); None if it has none."""
    try:
        return float(_text(stamp)) if stamp else None
    except ValueError:
        return None


def _moment(stamp: bytes | str | None) -> float | None:
    """RQ's ``enqueued_at`` (the enqueuer's clock): only for a job from an older build."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(_text(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
