"""What an operation's container may reach: the current network grant of its tool, read
from the store for the egress proxy (``EgressProxy(policy=...)``), which asks on every
request.

The grant is the operator's to change at any time (``bh tools grant``, ``docs/tools.md``)
and a revocation must take effect for runs already going, so a grant read is kept only
``fresh_for`` (default 5 s, on this process's monotonic clock) and then read again:
a proxied request after a change is judged by the new grant within that bound. What
never changes is kept longer: which tool version an operation runs (its record's
``tool``/``tool_version``). So a busy tool costs the store one read per tool version
per ``fresh_for`` plus one per operation, not one per request. A read that fails
decides nothing and gives no stale grant: the error reaches the proxy, which asks again
and ends in 503 (``ProxyLimits.policy_timeout``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, TypeVar

from session_store import SessionStore

#: How long a grant read is used before it is read again: the most a revocation waits.
DEFAULT_FRESH_FOR: Final = timedelta(seconds=5)
#: Operations (and tool versions) whose tool (grant) is kept; the oldest go first.
DEFAULT_REMEMBERED: Final = 4096

_K = TypeVar("_K")
_V = TypeVar("_V")

#: A tool's name and version, as an operation's record names it (None: the newest).
_ToolVersion = tuple[str, int | None]


@dataclass(frozen=True, slots=True)
class _Read:
    """A grant as read, and when (the monotonic clock)."""

    allow: tuple[str, ...]
    at: float


class GrantPolicy:
    """``await policy(operation_id)``: the destinations its tool is granted now (``()``
    for an operation or tool the store does not know)."""

    def __init__(
        self,
        store: SessionStore,
        *,
        fresh_for: timedelta = DEFAULT_FRESH_FOR,
        clock: Callable[[], float] = time.monotonic,
        remembered: int = DEFAULT_REMEMBERED,
    ) -> None:
        if fresh_for < timedelta(0):
            raise ValueError(f"fresh_for must not be negative, got {fresh_for}")
        self._store = store
        self._fresh_for = fresh_for.total_seconds()
        self._clock = clock
        self._remembered = remembered
        self._tools: dict[str, _ToolVersion] = {}
        self._grants: dict[_ToolVersion, _Read] = {}

    async def __call__(self, operation_id: str) -> tuple[str, ...]:
        tool = await self._tool_of(operation_id)
        return () if tool is None else await self._grant_of(tool)

    async def _tool_of(self, operation_id: str) -> _ToolVersion | None:
        """The tool version an operation runs: read once (a record's tool never changes);
        an operation not recorded (yet) is not remembered."""
        if (known := self._tools.get(operation_id)) is not None:
            return known
        record = await self._store.get_operation(operation_id)
        if record is None:
            return None
        return _kept(
            self._tools, operation_id, (record.tool, record.tool_version), self._remembered
        )

    async def _grant_of(self, tool: _ToolVersion) -> tuple[str, ...]:
        now = self._clock()
        read = self._grants.get(tool)
        if read is not None and now - read.at < self._fresh_for:
            return read.allow
        definition = await self._store.tools.get(*tool)
        allow = () if definition is None else definition.network.allow
        self._grants.pop(tool, None)  # re-inserted as the newest
        _kept(self._grants, tool, _Read(allow, now), self._remembered)
        return allow


def _kept(entries: dict[_K, _V], key: _K, value: _V, limit: int) -> _V:
    """``value`` stored under ``key``, the oldest entry dropped when ``entries`` is full."""
    if key not in entries and len(entries) >= limit:
        del entries[next(iter(entries))]
    entries[key] = value
    return value
