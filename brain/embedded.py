"""Running a session to completion in one process, without Redis or NATS.

The embedded runner claims each drive with the next fence after the stored one (the
claim record arbitrates between runners), sleeps until the next due timer, and stops
when the session has nothing left to do or only waits on things outside its control.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from brain.runner import DriveReport, SessionRunner


async def run_until_idle(
    runner: SessionRunner,
    session_id: str,
    *,
    longest_sleep: timedelta = timedelta(seconds=5),
) -> DriveReport:
    """Drive the session again and again until it is finished or cannot move by itself."""
    while True:
        report = await runner.drive(session_id)
        if report.fenced or not report.active or report.next_wake_at is None:
            return report
        delay = (report.next_wake_at - runner.services.clock()).total_seconds()
        await asyncio.sleep(min(max(delay, 0.0), longest_sleep.total_seconds()))
