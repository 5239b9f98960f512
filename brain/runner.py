"""The session runner: drives sessions' tasks, one atomic commit per decision.

A *drive* (``brain.drive``) is what a Brain does when woken for a session: claim it with
a fence, then repeatedly plan, commit the decisions together with the intents of the
phases about to run, run those phases outside any transaction, and commit each outcome
atomically. It returns when nothing can move, reporting blocked and parked tasks and
when to wake up next. Between drives the Brain keeps nothing: the next drive, here or
on any other host, starts from the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import Field

from brain.drive import Drive, HolderAlive
from brain.registry import Registry
from brain.services import Services
from contracts import Task, TaskStatus
from contracts.model import Frozen
from coordination.leases import LeaseProof
from session_store import SessionHandle, SessionStore


class DriveReport(Frozen):
    """What one drive of a session did and left behind."""

    session_id: str
    runner_id: str
    fence: int
    commits: int = 0
    phases: int = 0
    active: bool = False
    fenced: bool = False
    blocked: dict[str, str] = Field(default_factory=dict)
    parked: dict[str, str] = Field(default_factory=dict)
    next_wake_at: datetime | None = None
    #: operations the session waits on that have no result yet (run by the Hands)
    awaiting: tuple[str, ...] = ()
    #: the session's seq as the drive left it
    seq: int = 0

    @property
    def quiet(self) -> bool:
        """Whether the session needs nothing until someone else acts: active, left by
        its own drive (not fenced out) with nothing runnable and nothing blocked — it
        waits for a person, a child, a timer or a tool call (the attention set watches
        those)."""
        return self.active and not self.fenced and not self.blocked


class SessionRunner:
    """Runs sessions with the task kinds of one registry; holds no session state.

    Its ``services.runner_id`` names the holder of the sessions it claims: re-driving a
    session it still holds writes no new claim.
    """

    def __init__(
        self,
        store: SessionStore,
        registry: Registry,
        services: Services,
        *,
        root_kind: str = "agent",
        poll_interval: timedelta = timedelta(milliseconds=250),
    ) -> None:
        self.store = store
        self.registry = registry
        self.services = services
        self.root_kind = root_kind
        self.poll_interval = poll_interval

    async def drive(
        self,
        session_id: str,
        *,
        fence: int | None = None,
        lease: LeaseProof | None = None,
        holder_alive: HolderAlive | None = None,
        handle: SessionHandle | None = None,
    ) -> DriveReport:
        """Move every task that can move; claim the session (with ``fence``, or when
        running embedded the next fence after the stored one unless this runner holds
        it) only once there is something to do. ``lease``: proven before every side
        effect; ``holder_alive``: whether a previous holder still lives (its interrupted
        phase starts are then not crashes); without it every one is. ``handle``: the
        session as the caller just loaded it (else it is loaded here)."""
        if handle is None:
            handle = await self.store.session(session_id)
        drive = Drive(self, handle, lease=lease, holder_alive=holder_alive)
        held = await drive.run(fence)
        return _report(drive, held)

    async def look(
        self, handle: SessionHandle, *, holder_alive: HolderAlive | None = None
    ) -> DriveReport | None:
        """The report of a drive of ``handle`` that would find nothing to do (read-only:
        it writes nothing, so it needs no lease and no fence), or None when a drive has
        something to do."""
        drive = Drive(self, handle, holder_alive=holder_alive)
        if not await drive.idle():
            return None
        drive.fence = handle.fence
        return _report(drive, held=True)


def _report(drive: Drive, held: bool) -> DriveReport:
    state = drive.handle.state
    return DriveReport(
        session_id=state.session_id,
        runner_id=drive.services.runner_id,
        fence=drive.fence,
        commits=drive.commits,
        phases=drive.phases,
        active=state.is_active,
        fenced=not held,
        blocked=drive.plan.blocked,
        parked=_parked(state.tasks.values(), drive.uncertain),
        next_wake_at=drive.plan.next_wake_at,
        awaiting=tuple(sorted(drive.awaiting)),
        seq=drive.handle.seq,
    )


def _parked(tasks: Iterable[Task], uncertain: dict[str, str]) -> dict[str, str]:
    """Waiting tasks an operator must unblock: parked by this kernel, or waiting on an
    operation its executor (the Hands) parked as uncertain."""
    parked = {}
    for task in tasks:
        if task.status is not TaskStatus.WAITING or task.wait is None:
            continue
        if task.parked is not None:
            parked[task.id] = task.parked.reason
        elif held := [uncertain[op] for op in task.wait.operations if op in uncertain]:
            parked[task.id] = f"uncertain: {held[0]}"
    return parked
