"""The chaos run's fault plan: which kinds, in which seeded order, until when."""

from __future__ import annotations

import random

import pytest

from bh.chaos_plan import (
    BRAIN_KILLS,
    DOCKER_ONLY,
    FAULTS,
    WANTS_WORK,
    FaultPlan,
    UnknownFault,
    select,
)


def test_the_default_selection_is_every_kind_but_the_docker_only_ones() -> None:
    assert select() == tuple(kind for kind in FAULTS if kind not in DOCKER_ONLY)
    assert select(sandbox="docker") == FAULTS


def test_only_and_skip_narrow_the_selection_and_unknown_kinds_are_named() -> None:
    assert select(["wipe_nats", "kill_hands"]) == ("kill_hands", "wipe_nats")
    assert "store_outage" not in select(skip=["store_outage"])
    assert select(["restart_docker"]) == ()  # not without the Docker sandbox
    with pytest.raises(UnknownFault, match="nope"):
        select(["nope"])


def test_every_kind_comes_min_each_times_first_the_in_flight_ones_at_the_front() -> None:
    kinds = select()
    plan = FaultPlan.seeded(kinds, random.Random(3), min_each=2)
    rng = random.Random(4)
    first = [plan.next(rng) for _ in range(len(kinds) * 2)]
    assert plan.done()
    assert all(first.count(kind) == 2 for kind in kinds)
    assert set(first[: len(WANTS_WORK)]) == WANTS_WORK


def test_the_plan_goes_on_until_the_brain_kills_are_reached() -> None:
    plan = FaultPlan.seeded(select(), random.Random(1), brain_kills=20)
    assert plan.expected_faults() > len(plan.opening)  # more faults to reach the kills
    # the store outages alone (15 to 30 s) last longer than the pauses between faults
    assert plan.expected_seconds(1.5) > plan.expected_faults() * 1.5 + 20
    rng = random.Random(2)
    while not plan.done():
        plan.next(rng)
    assert plan.kills >= 20
    assert sum(plan.happened[kind] for kind in BRAIN_KILLS) == plan.kills


def test_the_same_seed_gives_the_same_schedule() -> None:
    def schedule(seed: int) -> list[str]:
        rng = random.Random(seed)
        plan = FaultPlan.seeded(select(), rng, min_each=1, brain_kills=10)
        return [plan.next(rng) for _ in range(40)]

    assert schedule(5) == schedule(5) != schedule(6)


def test_a_plan_without_brain_kills_ends_after_its_opening() -> None:
    plan = FaultPlan.seeded(("forge_wake",), random.Random(0), min_each=3, brain_kills=50)
    rng = random.Random(0)
    assert [plan.next(rng) for _ in range(3)] == ["forge_wake"] * 3
    assert plan.done()
