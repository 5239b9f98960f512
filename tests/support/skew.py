"""A host whose wall clock is wrong, for tests of invariant 17 (no clock is shared).

A test runs a component inside ``wall_clock_off_by(seconds)`` to play a host whose clock
is that far ahead (negative: behind), while Redis and NATS keep their own time: what the
component writes or compares there must not change with it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, tzinfo
from types import ModuleType
from unittest import mock


@contextmanager
def wall_clock_off_by(seconds: float, *modules: ModuleType) -> Iterator[None]:
    """This process's wall clock ``seconds`` off while inside: ``time.time`` everywhere,
    and ``datetime.now`` as each of ``modules`` reads it (``from datetime import
    datetime`` binds the class in the module, so it is skewed there)."""
    real = time.time
    with ExitStack() as patches:
        patches.enter_context(mock.patch("time.time", lambda: real() + seconds))
        for module in modules:
            if getattr(module, "datetime", None) is datetime:
                patches.enter_context(mock.patch.object(module, "datetime", _skewed(seconds)))
        yield


def _skewed(seconds: float) -> type[datetime]:
    class Skewed(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:
            return datetime.now(tz) + timedelta(seconds=seconds)

    return Skewed
