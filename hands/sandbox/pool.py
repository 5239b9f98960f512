"""Warm containers: created and started ahead of the operations that will use them.

A Hands keeps, per tool (per exact tool definition: image, command, limits, network),
a few containers already created and started — hardened exactly like a cold run's, the
tool's interpreter up and waiting on stdin (``hands.sandbox.bootstrap``). A run takes
one, binds it to its operation by renaming it to the operation's container name (so a
reconnecting Hands finds it by name, as it finds a cold run), and only then writes it
the job. A warm container serves exactly one operation: it is never returned once
bound, and the pool is refilled off the run's path.

The pool is bounded three ways: each tool's size (``BH_HANDS_WARM``: ``tool=n`` pairs,
``*`` for every tool), the Hands' concurrency (at most that many warm containers in
all), and a memory budget (the sum of their memory limits). An empty pool is no
error: the run starts cold. A warm container older than half its idle limit is not
taken (it would exit unbound soon): it is removed and the run starts cold.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from contracts.tool import ToolDefinition


@dataclass(frozen=True, slots=True)
class WarmContainer:
    id: str
    name: str
    key: str
    memory: int
    made: float = field(default_factory=time.monotonic)


def pool_key(tool: ToolDefinition) -> str:
    """The pool a tool's runs take from: one per exact definition (a new version, image
    or limit gets fresh containers)."""
    return hashlib.sha256(tool.model_dump_json().encode()).hexdigest()[:16]


class WarmPool:
    """The bookkeeping of warm containers (the sandbox makes and removes them)."""

    def __init__(
        self, sizes: Mapping[str, int], *, limit: int, memory_bytes: int, idle_s: float
    ) -> None:
        self.sizes, self.limit, self.memory_bytes, self.idle_s = (
            dict(sizes),
            limit,
            memory_bytes,
            idle_s,
        )
        self._ready: dict[str, deque[WarmContainer]] = {}
        self._making: dict[str, int] = {}

    def size_for(self, tool: ToolDefinition) -> int:
        """Warm containers kept for ``tool``: none for a tool that mounts a workspace (a
        warm container is made before its run's tree exists, and mounts are fixed at
        create: such runs always start cold)."""
        if tool.workspace.mounts:
            return 0
        return max(0, self.sizes.get(tool.name, self.sizes.get("*", 0)))

    def take(self, key: str) -> tuple[WarmContainer | None, list[WarmContainer]]:
        """A fresh warm container of ``key`` (None: start cold), and the stale ones
        met on the way (to remove)."""
        ready, stale = self._ready.get(key), list[WarmContainer]()
        while ready:
            container = ready.popleft()
            if time.monotonic() - container.made < self.idle_s / 2:
                return container, stale
            stale.append(container)
        return None, stale

    def give_back(self, container: WarmContainer) -> None:
        """An unbound container a run did not use after all (its name was taken)."""
        self._ready.setdefault(container.key, deque()).appendleft(container)

    def wants(self, key: str, tool: ToolDefinition) -> bool:
        """Whether one more warm container of ``tool`` fits every bound."""
        have = len(self._ready.get(key, ())) + self._making.get(key, 0)
        total = sum(map(len, self._ready.values())) + sum(self._making.values())
        memory = sum(c.memory for ready in self._ready.values() for c in ready)
        memory += sum(self._making.values()) * tool.limits.memory_bytes  # a bound, not exact
        return (
            have < self.size_for(tool)
            and total < self.limit
            and memory + tool.limits.memory_bytes <= self.memory_bytes
        )

    def making(self, key: str, delta: int) -> None:
        self._making[key] = self._making.get(key, 0) + delta

    def add(self, container: WarmContainer) -> None:
        self._ready.setdefault(container.key, deque()).append(container)

    def drain(self, key: str | None = None) -> list[WarmContainer]:
        """Every ready container (of ``key``), taken out (to remove)."""
        keys = list(self._ready) if key is None else [key]
        return [c for k in keys for c in self._ready.pop(k, ())]


def parse_sizes(text: str) -> dict[str, int]:
    """``"echo=2,*=1"`` → ``{"echo": 2, "*": 1}`` (``ValueError`` on anything else)."""
    sizes: dict[str, int] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, equals, count = part.partition("=")
        if not equals or not name.strip() or not count.strip().isdigit():
            raise ValueError(f"{part!r} is not tool=count (e.g. echo=2 or *=1)")
        sizes[name.strip()] = int(count)
    return sizes
