"""Fixtures shared by all test suites."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.stores import BACKENDS, StoreLocation, drop_table, new_location


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
