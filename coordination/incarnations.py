"""Is a Brain incarnation still alive? Evidence for the restart limit, in Redis.

A phase start that left no outcome is a *crash* only if the process that ran it is gone;
a holder that lost its lease to a pause, a FLUSHALL or a network blip is alive, and its
interrupted start is not counted towards the restart limit (``docs/leases.md``). Each
live Brain keeps one record per incarnation (its ``runner_id``)::

    <prefix>:incarnation:<runner_id>   hash {process, beats}   PX (long; memory only)

``beats`` rises every beat (a third of the lease TTL). Whether the incarnation is alive
is decided from evidence, never by comparing clocks:

1. the record names a process on this kernel and pid namespace
   (``runtime.incarnation``): gone or alive is then *certain* (a stopped process is
   alive);
2. otherwise (another host, or no record: expired or lost to a FLUSHALL) the caller
   watches the record for ``window`` seconds of its own monotonic clock: a beat (or a
   record that reappears) proves the incarnation alive; none proves it gone — or frozen
   for longer than the window, which is then counted like a death.

Redis errors come out as ``StoreUnavailable`` (from this module only).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta

import redis
from redis.asyncio import Redis
from redis.exceptions import RedisError

from contracts.errors import StoreUnavailable
from contracts.model import Frozen
from runtime.incarnation import ProcessState, process_state

#: how long a record outlives its last beat: bounds memory, decides nothing
RECORD_TTL = timedelta(hours=1)


class RedisIncarnations:
    """Beats of live Brain incarnations, and the liveness evidence they give."""

    def __init__(self, client: Redis, *, prefix: str = "bh") -> None:
        self._client = client
        self._prefix = prefix

    def key(self, runner_id: str) -> str:
        return f"{self._prefix}:incarnation:{runner_id}"

    async def beat(
        self, runner_id: str, process: str, *, stats: Mapping[str, str | float] | None = None
    ) -> None:
        """Record that ``runner_id`` (running as ``process``) is alive now, with what it
        says of itself (``stats``: its route, slots, leases — shown to operators)."""
        key = self.key(runner_id)
        with _translated("beat", runner_id):
            async with self._client.pipeline(transaction=True) as pipe:
                fields: dict[str | bytes, str | float] = {"process": process}
                fields.update(stats or {})
                pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
                pipe.hincrby(key, "beats", 1)
                pipe.pexpire(key, RECORD_TTL)
                await pipe.execute()

    async def alive(self, runner_id: str, *, window: float) -> bool:
        """Whether ``runner_id`` is alive: certain on this host, else a beat within
        ``window`` seconds (see the module docstring)."""
        first = await self._read(runner_id)
        if first is not None:
            state = process_state(first[0])
            if state is ProcessState.GONE:
                return False
            if state in (ProcessState.ALIVE, ProcessState.THIS):
                return True
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:
            await asyncio.sleep(min(window / 10, max(0.0, deadline - time.monotonic())))
            now = await self._read(runner_id)
            if now is not None and (first is None or now[1] != first[1]):
                return True
        return False

    async def _read(self, runner_id: str) -> tuple[str, int] | None:
        with _translated("read", runner_id):
            found = await self._client.hmget(self.key(runner_id), ["process", "beats"])
        process, beats = (_text(item) for item in found)
        if process is None or beats is None:
            return None
        return process, int(beats)


def _text(reply: object) -> str | None:
    if reply is None:
        return None
    return reply.decode() if isinstance(reply, bytes) else str(reply)


@contextmanager
def _translated(action: str, runner_id: str) -> Iterator[None]:
    try:
        yield
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(
            f"Redis failed to {action} the incarnation record of {runner_id}: "
            f"{type(exc).__name__}: {exc}",
            runner_id=runner_id,
            action=action,
        ) from exc


class BrainBeat(Frozen):
    """A live Brain incarnation as its last beat described it (for operators)."""

    runner: str
    process: str = ""
    route: str = ""
    slots: int = 0
    in_use: int = 0
    leases: int = 0
    beats: int = 0
    #: seconds since its last beat, on Redis's clock: every beat sets the record's TTL
    #: to ``RECORD_TTL``, so it is ``RECORD_TTL`` less the TTL left (None: no TTL)
    age_s: float | None = None


def brains(client: redis.Redis, prefix: str, *, limit: int = 500) -> list[BrainBeat]:
    """The Brain incarnations with a beat record (alive within ``RECORD_TTL``; a dead
    one's record stays until it expires: see ``age_s``), at most ``limit``."""
    keys: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:incarnation:*", count=200):
        keys.append(key)
        if len(keys) >= limit:
            break
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hgetall(key)
            pipe.pttl(key)
        answers = pipe.execute()
    found = []
    start = len(f"{prefix}:incarnation:")
    for key, record, left in zip(keys, answers[::2], answers[1::2], strict=True):
        fields = {_text(k) or "": _text(v) or "" for k, v in record.items()}
        numbers = {
            name: int(fields[name])
            for name in ("slots", "in_use", "leases", "beats")
            if fields.get(name, "").isdigit()
        }
        runner = (_text(key) or "")[start:]
        age = max(0.0, RECORD_TTL.total_seconds() - left / 1000) if left > 0 else None
        found.append(
            BrainBeat(
                runner=runner,
                process=fields.get("process", ""),
                route=fields.get("route", ""),
                age_s=age,
                **numbers,
            )
        )
    return sorted(found, key=lambda beat: beat.runner)
