"""What a Hands instance says of itself, for operators: its beat.

Each Hands writes its beat to the Session Store every few seconds (``session_store.fleet``)
and removes it when it stops; the console's fleet page shows them. A beat decides
nothing: the store's operation records do. Its times are the Hands host's clock, shown
as they are; a reader on another host calls a beat *silent* by its own clock, a display
hint only.
"""

from __future__ import annotations

from pydantic import Field

from contracts.model import AwareDatetime, Frozen, Identifier


class RunningOperation(Frozen):
    """An operation this Hands is handling now, and its container if one is up."""

    operation_id: Identifier
    tool: str
    session_id: Identifier
    since: AwareDatetime
    container: str | None = None
    #: the engine's word for the container (running, exited, ...)
    state: str | None = None


class DispatchQueue(Frozen):
    """The dispatch stream's backlog, as this Hands read it at its beat."""

    pending: int = Field(ge=0)
    ack_pending: int = Field(ge=0)
    #: seconds since the oldest dispatch still queued was published (0: empty)
    oldest_age_seconds: float = Field(ge=0)


class HandsBeat(Frozen):
    executor: Identifier
    #: host and pid, for an operator looking for the process
    process: str
    concurrency: int = Field(ge=1)
    running: tuple[RunningOperation, ...] = ()
    #: None: NATS did not answer at this beat
    queue: DispatchQueue | None = None
    beat_at: AwareDatetime
    #: the interval between its beats: a beat older than a few of these is silent
    every_seconds: float = Field(gt=0)

    @property
    def in_use(self) -> int:
        return len(self.running)
