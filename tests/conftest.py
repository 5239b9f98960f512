"""Fixtures and hooks shared by all test suites."""

from __future__ import annotations

import gc
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.services import url_of
from tests.support.stores import BACKENDS, StoreLocation, drop_table, new_location
from tests.support.turns import Turns

#: set on a test whose call failed (tests/conftest.py's teardown collects after it)
_FAILED = pytest.StashKey[bool]()

#: under pytest-xdist: this worker's name (gw0, gw1, ...) and the run's id
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
_TURNS = Turns(Path(tempfile.gettempdir()) / f"bh-test-turns-{_RUN}") if _RUN else None


def pytest_configure(config: pytest.Config) -> None:
    if _WORKER:
        # Redis's keys are per database: each worker gets one of its own (7-15; 0 is a
        # one-process run's; 5 and 6 belong to the data-loss tests of test_leases.py
        # and test_scheduler.py, which flush them), so no worker reads another's keys.
        # The services a test starts inherit it.
        url = urlsplit(url_of("BH_REDIS_URL"))
        database = 7 + int(_WORKER.removeprefix("gw")) % 9
        os.environ["BH_REDIS_URL"] = url._replace(path=f"/{database}").geturl()
        # A worker is started with COLUMNS=80 and LINES=24, which the `bh` consoles would
        # take for a terminal's size (cutting their tables); one process has neither.
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if _WORKER:
        from tests.support.scheduling import longest_first

        longest_first(items)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A file at a time, groups together, longest first: tests/support/scheduling.py."""
    from tests.support.scheduling import FileScheduling

    config.option.loadscopereorder = False  # keep longest_first's order
    return FileScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    """Side by side, a test marked ``exclusive`` (it restarts a server every test uses)
    waits for the others to finish and runs alone; see tests/support/turns.py."""
    if _TURNS is None:
        return (yield)
    turn = _TURNS.exclusive if item.get_closest_marker("exclusive") else _TURNS.shared
    with turn():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _collected_after_a_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """A failed test's traceback keeps what it had open alive (pytest keeps it as
    ``sys.last_traceback`` for post-mortems) until a garbage collection during the next
    test, which then fails on their unclosed-resource warnings. Collected here instead,
    after the test's other fixtures are torn down, the warnings land on the test that
    failed, and one failure stays one failure."""
    yield
    if request.node.stash.get(_FAILED, False):
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()


@pytest.fixture(params=[pytest.param(kind, marks=getattr(pytest.mark, kind)) for kind in BACKENDS])
async def location(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreLocation]:
    """A fresh store location on each backend in turn."""
    place, prepare = new_location(request.param, tmp_path)
    if request.param != "sqlite":
        await prepare()
    yield place
    await place.close_all()
    if request.param == "dynamodb":
        await drop_table(place.url)
