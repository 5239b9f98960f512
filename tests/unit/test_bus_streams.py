"""How a stream on the server differs from the one a deployment wants (``bus.streams``):
what only gets logged and what fails the bus's readiness."""

from __future__ import annotations

from dataclasses import replace

import pytest
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from bus.streams import differences

WANTED = StreamConfig(
    name="BH_RESULTS",
    subjects=["bh.tools.results.>"],
    retention=RetentionPolicy.LIMITS,
    storage=StorageType.FILE,
    duplicate_window=120.0,
    max_age=86400.0,
    num_replicas=1,
)
#: as the server answers for ``WANTED``: its defaults filled in, enums as their values
ON_SERVER = replace(
    WANTED,
    retention="limits",  # type: ignore[arg-type]
    storage="file",  # type: ignore[arg-type]
    max_msgs=-1,
    max_bytes=-1,
    max_msgs_per_subject=-1,
    max_msg_size=-1,
    max_consumers=-1,
    sealed=False,
)


def test_a_stream_as_the_server_fills_in_the_wanted_one_does_not_differ() -> None:
    assert differences(WANTED, ON_SERVER, replicas=True) == []


@pytest.mark.parametrize(
    ("change", "shown", "critical"),
    [
        ({"max_msgs": 1}, "max_msgs is 1, want unlimited", True),
        ({"max_bytes": 1024}, "max_bytes is 1024, want unlimited", True),
        ({"max_msg_size": 512}, "max_msg_size is 512, want unlimited", True),
        ({"max_age": 60.0}, "max_age is 60, want 86400", True),
        ({"max_age": 0.0}, "max_age is unlimited, want 86400", False),
        ({"max_age": 172800.0}, "max_age is 172800, want 86400", False),
        ({"subjects": ["bh.elsewhere.>"]}, "subjects is ['bh.elsewhere.>'], want", True),
        ({"retention": "workqueue"}, "retention is workqueue, want limits", True),
        ({"sealed": True}, "sealed is True, want False", True),
        ({"duplicate_window": 30.0}, "duplicate_window is 30, want 120", False),
        ({"storage": "memory"}, "storage is memory, want file", False),
        ({"num_replicas": 3}, "num_replicas is 3, want 1", False),
    ],
)
def test_each_difference_is_named_and_the_ones_that_lose_messages_are_critical(
    change: dict[str, object], shown: str, critical: bool
) -> None:
    [difference] = differences(WANTED, replace(ON_SERVER, **change), replicas=True)
    assert str(difference).startswith(shown)
    assert difference.critical is critical


def test_the_replicas_count_only_when_the_deployment_chose_them() -> None:
    """A service leaves the copies to the init job (``BusSettings.replicas`` None)."""
    assert differences(WANTED, replace(ON_SERVER, num_replicas=3), replicas=False) == []
