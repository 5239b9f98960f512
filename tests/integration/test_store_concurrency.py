"""Several OS processes race to commit to one session: no gap, no fork, no lost receipt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.processes import python_module
from tests.support.stores import SUITE_BACKENDS, StoreLocation, location_fixture

pytestmark = [pytest.mark.store, pytest.mark.slow]

location = location_fixture(SUITE_BACKENDS)  # also on radosgw

WORKERS = 4
ATTEMPTS = 25


def race(url: str, barrier: Path, session: str) -> tuple[dict[str, int], set[str]]:
    """Run the racing workers; every receipt they got and every id they saw rejected."""
    workers = [
        python_module(
            "tests.support.commit_worker",
            "race",
            url,
            session,
            f"w{n}",
            str(ATTEMPTS),
            str(barrier),
        )
        for n in range(WORKERS)
    ]
    barrier.touch()
    receipts: dict[str, int] = {}
    rejected: set[str] = set()
    failures = []
    for worker in workers:
        with worker:
            out, err = worker.communicate(timeout=180)
        if worker.returncode != 0:
            failures.append(err)
        for line in out.splitlines():
            message = json.loads(line)
            if "ok" in message:
                receipts[message["id"]] = message["ok"]
            else:
                rejected.add(message["conflict"])
    assert not failures, failures[0]
    return receipts, rejected


async def test_racing_processes_never_fork_the_log(location: StoreLocation, tmp_path: Path) -> None:
    # On a loaded machine the workers may happen never to overlap: race again, on a new
    # session, before concluding the run proved nothing.
    for round_ in range(3):
        session = f"contended-{round_}"
        receipts, rejected = race(location.url, tmp_path / f"go-{round_}", session)
        assert len(receipts) + len(rejected) == WORKERS * ATTEMPTS, "every attempt has an outcome"
        if rejected:
            break
    assert rejected, "the workers never collided in 3 races, so this run proved nothing"
    handle = await (await location.open()).session(session)
    log = [entry.id for entry in await handle.entries()]
    assert handle.seq == len(log) == len(receipts), "one commit per receipt, no gap"
    assert {entry_id: seq for seq, entry_id in enumerate(log, start=1)} == receipts, (
        "every receipt names the seq its commit holds in the log"
    )
    assert rejected.isdisjoint(log), "a rejected commit must not be in the log"
