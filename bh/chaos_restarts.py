"""The chaos run's faults that restart a service into a changed world for a while.

- ``pause_hands_mid_start``: a Hands restarted with ``BH_STOP_AT=hands:claimed#1`` stops
  itself (SIGSTOP) right after its first claim of an attempt, before the run starts —
  a paused process, a starved engine. It is held past its claim, long enough for another
  Hands to take the operation over (the other one verifies the operation as not done and
  runs it), then resumed: it must start nothing (``hands.claim``: its claim was
  superseded). A run it started anyway is an operation executed twice.
- ``skew_clock``: a Brain and a Hands restarted with their wall clocks 30 s fast or slow
  (libfaketime, ``DONT_FAKE_MONOTONIC``: only the wall clock moves), for a while, then
  restarted right. No decision may depend on a host's wall clock (invariant 17): the
  store's clock, Redis's, and each process's monotonic one are what count.
"""

from __future__ import annotations

import asyncio
import glob
import random
import signal
import time
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from bh.fleet import Fleet

#: how long a paused Hands is held: past its claim (the chaos ``count`` tool's timeout
#: plus the Hands' start allowance, plus the takeover margin) and another Hands'
#: redelivery of the dispatch (the chaos run's ack wait) and takeover
PAUSE_SECONDS = 16.0
#: how long a Brain and a Hands run with skewed wall clocks
SKEW_SECONDS = 8.0
#: the skew, either way
SKEW = 30
#: how long to wait for a restarted Hands to reach a claim
CLAIM_WITHIN = 20.0


async def pause_hands_mid_start(fleet: Fleet, hands: list[str], rng: random.Random) -> str:
    target = rng.choice(hands)
    fleet.kill(target)
    process = fleet.start(target, BH_STOP_AT="hands:claimed#1")
    if not await _stopped(process.pid, within=CLAIM_WITHIN):
        fleet.kill(target)
        fleet.start(target)
        return f"{target} (claimed nothing in {CLAIM_WITHIN:.0f} s: restarted)"
    await asyncio.sleep(PAUSE_SECONDS)
    fleet.signal(target, signal.SIGCONT)
    return f"{target} (stopped right after a claim, resumed {PAUSE_SECONDS:.0f} s later)"


async def _stopped(pid: int, *, within: float) -> bool:
    """Whether ``pid`` stopped itself (SIGSTOP) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                return True
        except psutil.NoSuchProcess:
            return False
        await asyncio.sleep(0.1)
    return False


def libfaketime() -> str | None:
    """The path of libfaketime's thread-safe library (Debian's ``faketime``), if any."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


async def skew_clock(fleet: Fleet, brains: list[str], hands: list[str], rng: random.Random) -> str:
    library = libfaketime()
    if library is None:
        return "skipped: libfaketime is not installed (apt-get install faketime)"
    targets = [rng.choice(brains), rng.choice(hands)]
    skew = rng.choice((SKEW, -SKEW))
    skewed = {"LD_PRELOAD": library, "FAKETIME": f"{skew:+d}s", "DONT_FAKE_MONOTONIC": "1"}
    for name in targets:
        fleet.kill(name)
        fleet.start(name, **skewed)
    await asyncio.sleep(SKEW_SECONDS)
    for name in targets:
        fleet.kill(name)
        fleet.start(name)
    return f"{' and '.join(targets)} {skew:+d} s for {SKEW_SECONDS:.0f} s"
