"""How tests are handed to pytest-xdist's workers (imported only when it runs): a test
file at a time, so a module's fixtures are set up once and its tests run in their written
order (some build on the one before: ``test_devstack_rgw.py`` writes an object in one
test and reads it in the next), except that tests marked ``xdist_group(name)`` go
together wherever they are (``bh up``'s fixed ports). The longest files are handed out
first (``longest_first``), so the run does not end waiting on one of them."""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadGroupScheduling

#: markers of the longest tests, in the order their files are handed out
_FIRST = ("deploy", "chaos", "slow")


class FileScheduling(LoadGroupScheduling):  # type: ignore[misc]
    def _split_scope(self, nodeid: str) -> str:
        group = super()._split_scope(nodeid)  # an xdist_group's name, else the test
        return group if group != nodeid else nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` (in place) so files with deploy, then chaos, then slow tests
    come first; files keep their relative order, and tests their order in the file."""
    rank: dict[str, int] = {}
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        marked = [i for i, name in enumerate(_FIRST) if item.get_closest_marker(name)]
        rank[file] = min(rank.get(file, len(_FIRST)), *marked, len(_FIRST))
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])
