"""How a stream found on the server differs from the one this deployment wants.

Services create a missing stream and never change an existing one: only the operator
may (``bh init`` aligns them; the NATS permissions of ``bh.devstack.auth`` refuse a
service role's update). A difference is reported instead — logged once, and when it is
*critical* the bus's readiness check fails (``bus.Bus.check``), because the stream
then loses or refuses messages the tool path needs:

- its subjects or its retention are not the wanted ones (publishes land nowhere, or a
  work queue became a log);
- it is sealed;
- a limit (messages, bytes, messages per subject, message size, age) is tighter than
  the wanted one: the server drops or refuses messages beyond it.

Anything else (the duplicate window, a longer age, the storage, the replicas) is only
logged: the tool path still works, the store being the truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from nats.js.api import StreamConfig

#: limits where a number <= 0 (or none) means unlimited
_LIMITS: Final = ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size", "max_age")
_SAME: Final = ("retention", "storage", "duplicate_window")


@dataclass(frozen=True)
class Difference:
    """One setting of a stream that is not as wanted."""

    setting: str
    wanted: object
    found: object
    #: the stream loses or refuses messages the tool path needs (see the module doc)
    critical: bool

    def __str__(self) -> str:
        return f"{self.setting} is {_shown(self.found)}, want {_shown(self.wanted)}"


def differences(wanted: StreamConfig, found: StreamConfig, *, replicas: bool) -> list[Difference]:
    """How ``found`` differs from ``wanted``; ``replicas``: whether the number of copies
    counts (a service leaves it to the deployment: ``BusSettings.replicas``)."""
    found_differences = [
        *_subjects(wanted, found),
        *(_same(name, wanted, found) for name in _SAME),
        *(_limit(name, wanted, found) for name in _LIMITS),
    ]
    if found.sealed:
        found_differences.append(Difference("sealed", False, True, critical=True))
    if replicas and (found.num_replicas or 1) != (wanted.num_replicas or 1):
        found_differences.append(
            Difference("num_replicas", wanted.num_replicas, found.num_replicas, critical=False)
        )
    return [difference for difference in found_differences if difference is not None]


def _subjects(wanted: StreamConfig, found: StreamConfig) -> list[Difference]:
    want, have = sorted(wanted.subjects or []), sorted(found.subjects or [])
    return [] if want == have else [Difference("subjects", want, have, critical=True)]


def _same(name: str, wanted: StreamConfig, found: StreamConfig) -> Difference | None:
    want, have = _plain(getattr(wanted, name)), _plain(getattr(found, name))
    if want is None or want == have:
        return None
    return Difference(name, want, have, critical=name == "retention")


def _limit(name: str, wanted: StreamConfig, found: StreamConfig) -> Difference | None:
    want, have = _bound(getattr(wanted, name)), _bound(getattr(found, name))
    if want == have:
        return None
    tighter = have is not None and (want is None or have < want)
    return Difference(name, want, have, critical=tighter)


def _bound(value: object) -> float | None:
    """A limit as a number, None for unlimited."""
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _plain(value: object) -> object:
    return value.value if isinstance(value, Enum) else value


def _shown(value: object) -> str:
    if value is None:
        return "unlimited"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
