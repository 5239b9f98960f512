"""SIGKILL a process in a tight commit loop at random moments, then reopen the store.

After every kill the log must hold exactly the commits whose receipts the process
printed, plus at most the one it had begun, and every record must decode (no torn
record). The next process continues the same session, so later kills also land in
baseline writes and index updates.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

from tests.support.processes import python_module
from tests.support.stores import SUITE_BACKENDS, StoreLocation, location_fixture

pytestmark = [pytest.mark.chaos, pytest.mark.store, pytest.mark.slow]

location = location_fixture(SUITE_BACKENDS)  # also on radosgw

#: SIGKILLs per backend: a bounded subset in the test command, 40 with BH_CHAOS_FULL=1
KILLS = 40 if os.environ.get("BH_CHAOS_FULL") else 12


def run_until_killed(url: str, rng: random.Random) -> tuple[list[tuple[int, str]], str | None]:
    """Start a committing process, kill it at a random moment; its receipts and in-flight id."""
    with python_module("tests.support.commit_worker", "loop", url, "crashy") as child:
        return _watch_and_kill(child, rng)


class _Tally:
    """What a committing worker has said: its receipts and the commit it has begun."""

    def __init__(self) -> None:
        self.receipts: list[tuple[int, str]] = []
        self.in_flight: str | None = None

    def feed(self, line: str) -> None:
        message = json.loads(line)
        if "begin" in message:
            self.in_flight = message["begin"]
        elif "ok" in message:
            self.receipts.append((message["ok"], message["id"]))
            self.in_flight = None


def _watch_and_kill(
    child: subprocess.Popen[str], rng: random.Random
) -> tuple[list[tuple[int, str]], str | None]:
    assert child.stdout is not None and child.stderr is not None
    tally = _Tally()
    deadline: float | None = None
    while deadline is None or time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            raise AssertionError(f"worker exited early: {child.stderr.read()}")
        tally.feed(line)
        if deadline is None and tally.receipts:  # the loop is hot: pick the kill moment
            deadline = time.monotonic() + rng.uniform(0.0, 0.4)
    child.send_signal(signal.SIGKILL)
    # Lines written before the kill count; read them through the same buffered pipe
    # (communicate() would skip what readline() already buffered).
    for line in child.stdout.read().splitlines():
        tally.feed(line)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return tally.receipts, tally.in_flight


async def test_sigkill_loses_no_receipt_and_tears_no_record(location: StoreLocation) -> None:
    rng = random.Random(20261130)
    confirmed: dict[int, str] = {}
    for kill in range(KILLS):
        receipts, in_flight = run_until_killed(location.url, rng)
        confirmed.update(receipts)
        handle = await (await location.open()).session("crashy")  # decodes every record
        log = {seq: entry.id for seq, entry in enumerate(await handle.entries(), start=1)}
        assert handle.seq == len(log)
        missing = {seq: eid for seq, eid in confirmed.items() if log.get(seq) != eid}
        assert not missing, (
            f"kill {kill}: {len(missing)} receipted commits lost or moved, "
            f"first: {sorted(missing.items())[:3]}"
        )
        extra = {seq: eid for seq, eid in log.items() if seq not in confirmed}
        assert len(extra) <= 1, f"kill {kill}: commits without receipts: {extra}"
        if extra:
            ((seq, entry_id),) = extra.items()
            assert entry_id == in_flight and seq == max(confirmed) + 1, (
                f"kill {kill}: the only unreceipted commit must be the one in flight"
            )
            confirmed[seq] = entry_id  # it landed: from now on it must stay
    assert len(confirmed) > KILLS, "the processes committed too little to test anything"
