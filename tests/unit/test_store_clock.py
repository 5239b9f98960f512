"""The store's clock (``session_store.clock``): one time for every process of a store."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from session_store.backends.sqlite import SqliteBackend
from session_store.clock import MachineClock, ServerClock


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.at = 1000.0

    def __call__(self) -> float:
        return self.at


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_a_server_clock_keeps_the_best_lower_bound_of_the_dates_it_was_told() -> None:
    ticks = Ticks()
    clock = ServerClock(monotonic=ticks)
    clock.observe(epoch("2026-12-06T12:00:00+00:00"), ticks.at)  # the server was at 12:00:00.xxx
    ticks.at += 0.4
    assert clock.now() == datetime(2026, 12, 6, 12, 0, 0, 400000, UTC)
    # a date told 0.4 s later that is already 12:00:01: the second began in between,
    # so the server is ahead of the first bound; the clock moves up to it
    clock.observe(epoch("2026-12-06T12:00:01+00:00"), ticks.at)
    assert clock.now() == datetime(2026, 12, 6, 12, 0, 1, tzinfo=UTC)
    # an older-looking date (whole seconds, a slow response) does not pull it back
    ticks.at += 0.5
    clock.observe(epoch("2026-12-06T12:00:01+00:00"), ticks.at)
    assert clock.now() == datetime(2026, 12, 6, 12, 0, 1, 500000, UTC)


def test_a_server_clock_follows_the_server_back_when_its_clock_was_stepped() -> None:
    ticks = Ticks()
    clock = ServerClock(monotonic=ticks)
    clock.observe(epoch("2026-12-06T12:00:00+00:00"), ticks.at)
    ticks.at += 1
    clock.observe(epoch("2026-12-06T11:59:00+00:00"), ticks.at)
    assert clock.now() == datetime(2026, 12, 6, 11, 59, tzinfo=UTC)


def test_a_server_clock_reads_the_date_header_and_ignores_garbage() -> None:
    ticks = Ticks()
    clock = ServerClock(monotonic=ticks)
    clock.observe_header("not a date")
    clock.observe_header(None)
    with pytest.raises(RuntimeError, match="not been read"):
        clock.now()
    clock.observe_header("Sun, 06 Dec 2026 12:00:00 GMT")
    assert clock.now() == datetime(2026, 12, 6, 12, tzinfo=UTC)


async def test_a_server_clock_asks_the_store_when_nothing_told_the_time_for_a_while() -> None:
    ticks = Ticks()
    asked: list[float] = []
    clock = ServerClock(monotonic=ticks, refresh_after=timedelta(seconds=60))

    async def ask() -> None:
        asked.append(ticks.at)
        clock.observe(epoch("2026-12-06T12:00:00+00:00") + (ticks.at - 1000.0), ticks.at)

    clock.bind(ask)
    await clock.fresh()  # never read: asked
    ticks.at += 30
    await clock.fresh()  # told 30 s ago: not asked
    ticks.at += 31
    assert await clock.fresh() == datetime(2026, 12, 6, 12, 1, 1, tzinfo=UTC)
    assert asked == [1000.0, 1061.0]


async def test_every_process_of_a_sqlite_store_reads_one_time_whatever_its_own_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    first = await SqliteBackend(path).open()
    # a second process whose wall clock is 30 s fast opens the same file
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 30)
    second = await SqliteBackend(path).open()
    observer = await SqliteBackend(path, read_only=True).open()
    try:
        times = [first.clock.now(), second.clock.now(), observer.clock.now()]
        assert max(times) - min(times) < timedelta(seconds=1)
        assert abs(times[0] - datetime.fromtimestamp(real(), UTC)) < timedelta(seconds=1)
    finally:
        for backend in (first, second, observer):
            await backend.close()


def test_a_machine_clock_without_an_anchor_reads_this_process_clock() -> None:
    assert abs(MachineClock().now() - datetime.now(UTC)) < timedelta(seconds=1)


def test_a_server_clock_never_stays_ahead_of_what_the_server_can_have_meant() -> None:
    """This host's monotonic clock ran 1.5 s fast over an hour: the next date told says
    the server cannot be where this clock thinks (a date counts whole seconds: the
    server is under it plus 1 s). The clock falls back to the date, never judging a
    deadline early by more than the resolution."""
    ticks = Ticks()
    clock = ServerClock(monotonic=ticks)
    clock.observe(epoch("2026-12-06T12:00:00+00:00"), ticks.at)
    ticks.at += 3601.5  # the server's hour, as this fast clock counted it
    clock.observe(epoch("2026-12-06T13:00:00+00:00"), ticks.at)
    assert clock.now() == datetime(2026, 12, 6, 13, tzinfo=UTC)
