"""One scheduler built from URLs: what ``python -m scheduler`` runs, and what tests run
several of side by side (each with its own store client and Redis and NATS
connections, as separate processes would have)."""

from __future__ import annotations

from contextlib import AsyncExitStack

from pydantic import Field

from bus import Bus, BusSettings
from contracts.model import Frozen
from coordination import redis_client
from coordination.leases import RedisLeases
from coordination.routes import Routes, SessionRouter
from coordination.timer import Timer
from coordination.wakes import RQWakes, due_key
from scheduler.service import Scheduler, SchedulerSettings
from scheduler.turns import Turns
from session_store import open_store


class Connections(Frozen):
    """Where a scheduler finds the store, Redis and (optionally) NATS. ``namespace`` is
    the bus namespace and the Redis key prefix alike."""

    store_url: str
    redis_url: str
    nats_url: str | None = None
    namespace: str = "bh"
    #: the store's ``workspace_grace_seconds`` (``session_store.collection``)
    workspace_grace_seconds: float = Field(default=3600.0, ge=0)


async def build(
    connections: Connections,
    resources: AsyncExitStack,
    settings: SchedulerSettings | None = None,
    *,
    name: str | None = None,
) -> Scheduler:
    """A scheduler whose connections ``resources`` closes; wakes are routed to Brains
    that can run the session (``SessionRouter``), reconciler passes taken in turn."""
    prefix = connections.namespace
    store = await open_store(
        connections.store_url, workspace_grace_seconds=connections.workspace_grace_seconds
    )
    resources.push_async_callback(store.close)
    bus = None
    if connections.nats_url:
        bus = await Bus.connect(
            BusSettings(url=connections.nats_url, namespace=prefix), name="scheduler"
        )
        resources.push_async_callback(bus.close)
    client = redis_client.connect(connections.redis_url)
    resources.push_async_callback(client.aclose)
    routes = Routes(client, prefix=prefix)
    wakes = RQWakes(connections.redis_url, prefix=prefix, router=SessionRouter(store, routes))
    resources.callback(wakes.close)
    leases = RedisLeases(client, prefix=prefix)
    return Scheduler(
        store=store,
        bus=bus,
        wakes=wakes,
        leases=leases,
        turns=Turns(client, prefix=prefix),
        settings=settings,
        name=name,
        timer=Timer(client, prefix=prefix, due_key=due_key(prefix), held_key=leases.watch_key),
    )
