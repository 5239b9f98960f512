"""The chaos run's fault kinds and the seeded order they come in (pure: no I/O).

Every selected kind comes ``min_each`` times first, in seeded rounds (the in-call kinds
at the front of the first round, while work is flowing); after that, kinds are drawn at
random, Brain kills weighted up, until the asked number of Brain kills is reached.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Every fault kind the harness knows, in the order the docs list them.
FAULTS = (
    "kill_brain",
    "kill_brain_mid_model",
    "kill_brain_mid_tool",
    "stop_brain",
    "freeze_brain_mid_tool",
    "kill_hands",
    "restart_nats",
    "flush_redis",
    "restart_scheduler",
    "restart_api",
    "purge_streams",
    "wipe_nats",
    "store_outage",
    "pause_redis",
    "forge_dispatch",
    "forge_result",
    "forge_wake",
    "cancel_storm",
    "pause_hands_mid_start",
    "late_service",
    "limit_burst",
    "skew_clock",
    "malformed_ids",
    "restart_docker",
)
BRAIN_KILLS = ("kill_brain", "kill_brain_mid_model", "kill_brain_mid_tool")
#: kinds that mean most with work in flight: first in the first round
WANTS_WORK = frozenset(
    {
        "kill_brain_mid_model",
        "kill_brain_mid_tool",
        "freeze_brain_mid_tool",
        "purge_streams",
        "wipe_nats",
        "pause_hands_mid_start",
        "late_service",
    }
)
#: kinds that only mean something with the Docker sandbox (the default is the process
#: sandbox, whose runs an engine restart does not touch)
DOCKER_ONLY = frozenset({"restart_docker"})


#: about how many seconds a fault lasts, beyond a moment
LASTS = {
    "stop_brain": 4.0,
    "freeze_brain_mid_tool": 5.0,
    "kill_brain_mid_model": 1.0,
    "kill_brain_mid_tool": 1.0,
    "store_outage": 22.5,
    "pause_redis": 4.5,
    "wipe_nats": 2.0,
    "restart_nats": 2.0,
    "cancel_storm": 4.0,
    "forge_dispatch": 1.0,
    "forge_result": 1.0,
    "forge_wake": 1.0,
    "pause_hands_mid_start": 14.0,
    "late_service": 6.0,
    "limit_burst": 2.0,
    "skew_clock": 10.0,
    "malformed_ids": 3.0,
}


class UnknownFault(ValueError):
    """A fault kind the harness does not know."""


def select(
    only: Iterable[str] = (), skip: Iterable[str] = (), *, sandbox: str = "process"
) -> tuple[str, ...]:
    """The kinds of a run: ``only`` (all when empty) minus ``skip``; the Docker-only
    kinds only with the Docker sandbox."""
    only, skip = tuple(only), tuple(skip)
    unknown = sorted((set(only) | set(skip)) - set(FAULTS))
    if unknown:
        raise UnknownFault(
            f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}"
        )
    chosen = [kind for kind in FAULTS if (not only or kind in only) and kind not in skip]
    if sandbox != "docker":
        chosen = [kind for kind in chosen if kind not in DOCKER_ONLY]
    return tuple(chosen)


@dataclass
class FaultPlan:
    """The seeded order of faults: ``next`` gives the next kind, ``done`` says when the
    run has had what it asked for."""

    kinds: tuple[str, ...]
    min_each: int = 1
    brain_kills: int = 0
    opening: list[str] = field(default_factory=list)
    happened: Counter[str] = field(default_factory=Counter)

    @classmethod
    def seeded(
        cls, kinds: tuple[str, ...], rng: random.Random, *, min_each: int = 1, brain_kills: int = 0
    ) -> FaultPlan:
        opening: list[str] = []
        for round_ in range(max(min_each, 1) if kinds else 0):
            order = list(kinds)
            rng.shuffle(order)
            if round_ == 0:  # what needs work in flight comes while work is flowing
                order.sort(key=lambda kind: kind not in WANTS_WORK)
            opening += order
        return cls(kinds, min_each, brain_kills, opening)

    def next(self, rng: random.Random) -> str:
        if self.opening:
            kind = self.opening.pop(0)
        else:
            kind = rng.choice([*self.kinds, *(k for k in BRAIN_KILLS if k in self.kinds)])
        self.happened[kind] += 1
        return kind

    @property
    def kills(self) -> int:
        return sum(self.happened[kind] for kind in BRAIN_KILLS)

    def done(self) -> bool:
        if self.opening:
            return False
        return self.kills >= self.brain_kills or not any(k in self.kinds for k in BRAIN_KILLS)

    def expected_seconds(self, fault_every: float) -> float:
        """About how long the faults will take: the pauses between them and the faults
        that last (to spread the submissions over, so work is in flight throughout)."""
        per_draw = sum(LASTS.get(kind, 0.5) for kind in self.kinds) / len(self.kinds or "x")
        opening = sum(LASTS.get(kind, 0.5) for kind in self.opening)
        extra = self.expected_faults() - len(self.opening)
        return self.expected_faults() * fault_every + opening + extra * per_draw

    def expected_faults(self) -> int:
        """About how many faults the run will have (to spread the submissions over)."""
        kills_per_draw = sum(k in self.kinds for k in BRAIN_KILLS) * 2 / (len(self.kinds) + 3)
        opening_kills = sum(kind in BRAIN_KILLS for kind in self.opening)
        missing = max(0, self.brain_kills - opening_kills)
        extra = int(missing / kills_per_draw) if kills_per_draw else 0
        return len(self.opening) + extra
