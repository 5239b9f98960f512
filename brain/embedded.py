"""Running a session to completion in one process, without Redis or the scheduler.

The embedded runner claims each drive with the next fence after the stored one (the
claim record arbitrates between runners), sleeps until the next due timer, waits for
the Hands' results of operations it dispatched (``results``: woken by result events,
re-reading the store at least every ``longest_sleep``), and stops when the session has
nothing left to do or only waits on things outside its control.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from brain.results import ResultWaiter
from brain.runner import DriveReport, SessionRunner


async def run_until_idle(
    runner: SessionRunner,
    session_id: str,
    *,
    longest_sleep: timedelta = timedelta(seconds=5),
    results: ResultWaiter | None = None,
) -> DriveReport:
    """Drive the session again and again until it is finished or cannot move by itself."""
    while True:
        if results is not None:
            results.clear()  # events from here on may be news the drive has not seen
        report = await runner.drive(session_id)
        if report.fenced or not report.active:
            return report
        waits_for_results = results is not None and bool(report.awaiting)
        if report.next_wake_at is None and not waits_for_results:
            return report
        delay = longest_sleep.total_seconds()
        if report.next_wake_at is not None:
            due = (report.next_wake_at - runner.services.clock()).total_seconds()
            delay = min(max(due, 0.0), delay)
        if results is not None and waits_for_results:
            await results.wait(delay)
        else:
            await asyncio.sleep(delay)
