"""What a Hands instance or a scheduler says of itself, for operators: its beat.

Each Hands and each scheduler writes its beat to the Session Store every few seconds
(``session_store.fleet``) and removes it when it stops; the console's fleet page shows
them. A beat decides nothing: the store's operation records do. Its times are the
writer's clock, shown as they are; a reader on another host calls a beat *silent* by
its own clock, a display hint only.
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


class QueueBacklog(Frozen):
    """A stream's backlog for its consumer (``bus.backlog``), as read at a beat."""

    pending: int = Field(ge=0)
    ack_pending: int = Field(ge=0)
    #: seconds since the oldest message not yet acknowledged was published (0: empty)
    oldest_age_seconds: float = Field(ge=0)


class HandsBeat(Frozen):
    executor: Identifier
    #: host and pid, for an operator looking for the process
    process: str
    concurrency: int = Field(ge=1)
    running: tuple[RunningOperation, ...] = ()
    #: the dispatch stream's backlog; None: NATS did not answer at this beat
    queue: QueueBacklog | None = None
    beat_at: AwareDatetime
    #: the interval between its beats: a beat older than a few of these is silent
    every_seconds: float = Field(gt=0)

    @property
    def in_use(self) -> int:
        return len(self.running)


class SchedulerBeat(Frozen):
    """A scheduler's beat: the backlogs of both streams, read whether or not any Hands
    or Brain runs (the dispatch stream's also with no Hands, to scale them from zero)."""

    scheduler: Identifier
    process: str
    #: None: NATS did not answer at this beat (or this scheduler runs without NATS)
    dispatch: QueueBacklog | None = None
    #: result events not yet turned into wakes
    results: QueueBacklog | None = None
    beat_at: AwareDatetime
    every_seconds: float = Field(gt=0)
