"""The model calls in flight in one drive, each held at its estimate until the commit
of its phase's outcome: what a session budget counts besides the usage committed.

A budget is checked before each model call. Checked against committed usage alone, N
agents of one session starting their calls together each saw the same usage and all
went ahead (8 calls against a budget meant for one or two). So a call is admitted
only if the committed usage *plus the calls in flight, each at its estimate*
(``brain.model.estimate``) has not reached the budget, and the admitted call is held
here at once, in the same step of the event loop as its check: no other agent can
pass the check between the two. A call that would be admitted but for others in flight
waits until one of them is settled, then is checked again.

Why here and not in the store: only the lease holder runs a session's phases, all in
its one drive, so the drive sees every call in flight; a held call costs no commit.
A crash takes the holds with the calls they held for, whose usage was never committed
and is not counted (``docs/usage.md``); the next drive starts with none held, as a
durable hold would have to (the phase it was held for starts again).
"""

from __future__ import annotations

import asyncio

from contracts.usage import Usage


class Reservations:
    """Calls in flight in one drive, by task (one phase of a task runs at a time)."""

    def __init__(self) -> None:
        self._held: dict[str, Usage] = {}
        self._released = asyncio.Event()

    def others(self, task_id: str) -> Usage:
        """What the calls in flight of every task but ``task_id`` may use."""
        total = Usage()
        for holder, held in self._held.items():
            if holder != task_id:
                total = total.plus(held)
        return total

    def hold(self, task_id: str, estimate: Usage) -> None:
        """``task_id``'s call is admitted: hold ``estimate`` for it."""
        self._held[task_id] = estimate

    def release(self, task_id: str) -> None:
        """``task_id``'s phase outcome is committed (its usage with it), or the phase
        ended without one: what was held for its call is not held any more."""
        if self._held.pop(task_id, None) is not None:
            self._released.set()
            self._released = asyncio.Event()

    async def released(self) -> None:
        """Until the next release."""
        await self._released.wait()
