"""What the Docker engine says, in this package's terms.

The engine's exceptions as the project's error tree (``translated``), its timestamps and
container states read (``stamp``, ``started_at``, ``STATES``), and the ``RunOutcome`` of
each end of a run that is not the tool's own exit: refused by the engine, a warm
container that never got its job, removed before its end was read, nothing there to
collect. ``termination_of`` decides which ``Termination`` a stopped container's run had.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import docker.errors  # type: ignore[import-untyped]
import requests

from contracts import BrainhandsError, ConflictError, InvalidInput, NotFound, StoreUnavailable
from contracts.tool import Termination
from hands.sandbox import RunOutcome, RunState

_NEVER = datetime(1, 1, 1, tzinfo=UTC)
#: the engine's container states as a run's
STATES = {
    "created": RunState.CREATED,
    "running": RunState.RUNNING,
    "paused": RunState.RUNNING,
    "restarting": RunState.RUNNING,
    "removing": RunState.EXITED,
    "exited": RunState.EXITED,
    "dead": RunState.EXITED,
}


def translated(error: BaseException, engine: str) -> BaseException:
    """Docker's and requests' errors as this package's (others pass through)."""
    if isinstance(error, docker.errors.NotFound):
        return NotFound(str(error.explanation or error))
    if isinstance(error, docker.errors.APIError):
        status = error.status_code or 500
        message = f"docker engine: {error.explanation or error}"
        if status == 409:
            return ConflictError(message)
        if status >= 500:
            return StoreUnavailable(message, status=status)
        return InvalidInput(message, status=status)
    if isinstance(error, requests.exceptions.RequestException | docker.errors.DockerException):
        return StoreUnavailable(f"{engine} unreachable: {error}")
    return error


def termination_of(
    *, over_limit: bool, timed_out: bool, oom: bool, invalid: bool, interrupted: bool
) -> Termination:
    """The first that applies: what the executor did wins over what the tool did; a
    SIGKILL/SIGTERM death that none of these explains came from outside."""
    rules = (
        (over_limit, Termination.OUTPUT_LIMIT),
        (timed_out, Termination.TIMEOUT),
        (oom, Termination.OOM_KILLED),
        (invalid, Termination.INVALID_OUTPUT),
        (interrupted, Termination.INTERRUPTED),
    )
    return next((reason for applies, reason in rules if applies), Termination.EXITED)


def refused(name: str, what: str, error: BrainhandsError) -> RunOutcome:
    """The engine would not run it (an error from the engine, not about reaching it)."""
    if "status" not in error.details:
        raise error
    name = name.lstrip("/")
    detail = f"container {name}: {what}: {error.message}"
    return RunOutcome(
        termination=Termination.SANDBOX_ERROR, container=name, detail=detail, refused=True
    )


def never_bound(name: str) -> RunOutcome:
    """A warm container bound to the run whose job never (completely) arrived: the
    tool never started, so the operation certainly did not run there."""
    name = name.lstrip("/")
    detail = (
        f"container {name}: a warm container bound to the run ended before its job "
        "arrived (the executor that bound it died while writing it): the tool never started"
    )
    return RunOutcome(
        termination=Termination.SANDBOX_ERROR, container=name, detail=detail, refused=True
    )


def gone(name: str, reconnected: bool) -> RunOutcome:
    """Someone removed the container (``kill``: the run was cancelled) before its end
    was read."""
    return RunOutcome(
        termination=Termination.CANCELLED,
        container=name.lstrip("/"),
        reconnected=reconnected,
        detail="the container was removed before its run ended (killed)",
    )


def absent(name: str) -> RunOutcome:
    return RunOutcome(
        termination=Termination.CANCELLED,
        container=name.lstrip("/"),
        reconnected=True,
        absent=True,
        detail="no container of the operation to collect (collected or removed meanwhile)",
    )


def stamp(value: str | None) -> datetime | None:
    """One of the engine's timestamps (None: absent, unreadable, or its zero time)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return None if moment <= _NEVER else moment


def started_at(container: dict[str, Any]) -> datetime | None:
    return stamp(container["State"].get("StartedAt"))


def left(stop_at: float) -> float:
    """Seconds until ``stop_at`` on this process's monotonic clock (never below 0)."""
    return max(0.0, stop_at - time.monotonic())
