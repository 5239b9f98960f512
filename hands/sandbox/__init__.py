"""The sandbox boundary: run one operation of one tool in isolation, keyed by its id.

A sandbox names and labels what it starts by its deployment's namespace and the
operation id, so that an executor that died and came back (or another executor of the
deployment) finds the run instead of starting it again, and two deployments sharing an
engine never meet:
``run`` is *start or reconnect* — a running container is waited for, an exited one is
collected, and only when none exists is one created. What ran is told as a
``RunOutcome`` with a typed ``Termination``.

Implementations: ``hands.sandbox.docker.DockerSandbox`` (hardened Docker containers).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, JsonValue

from contracts import BrainhandsError, Operation
from contracts.attempt import DEADLINE_VARIABLE
from contracts.model import Frozen
from contracts.tool import DispatchMode, Termination, ToolDefinition
from hands.workspace.mount import RunMount

if TYPE_CHECKING:
    from hands.sandbox.output import Capture

#: Container label keys (all under ``io.brainhands.``).
LABEL_OPERATION = "io.brainhands.operation"
LABEL_SESSION = "io.brainhands.session"
LABEL_MODE = "io.brainhands.mode"
LABEL_OWNER = "io.brainhands.owner"
LABEL_TOOL = "io.brainhands.tool"
LABEL_DEADLINE = "io.brainhands.deadline"
#: on a warm container: the pool it was made for (its operation is its name, once bound)
LABEL_POOL = "io.brainhands.pool"


def container_name(
    operation_id: str, mode: DispatchMode = DispatchMode.RUN, *, namespace: str = ""
) -> str:
    """The one name a run of ``operation_id`` can have in ``namespace`` (a second create
    fails): ``bh-<namespace>_<operation id>[-query]``.

    Operation ids are a function of (session, task, key), so two deployments sharing a
    Docker engine meet the same ids; the deployment's namespace in the name keeps their
    containers apart. A namespace never holds ``_`` (``NAMESPACE``), so the first ``_``
    ends it and two (namespace, id) pairs never share a name. Docker names allow
    letters, digits, ``_``, ``.`` and ``-``; an id with other characters (identifiers
    may hold ``:`` and ``@``) keeps a readable form plus a hash of the exact id."""
    suffix = "" if mode is DispatchMode.RUN else f"-{mode.value}"
    prefix = f"bh-{namespace}_" if namespace else "bh-"
    if _DOCKER_SAFE.fullmatch(operation_id):
        return f"{prefix}{operation_id}{suffix}"
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", operation_id)
    digest = hashlib.sha256(operation_id.encode()).hexdigest()[:12]
    return f"{prefix}{readable}-{digest}{suffix}"


#: A deployment's sandbox namespace (the owner label and the container names' prefix).
NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")
_DOCKER_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class RunSpec(Frozen):
    """One run to start (or reconnect to)."""

    operation_id: str
    session_id: str
    tool: ToolDefinition
    args: JsonValue = None
    mode: DispatchMode = DispatchMode.RUN
    #: who runs it; written in the container's labels for the reaper and operators
    executor: str = ""
    #: after when the run is overdue (its executor's claim): written in its labels, so
    #: another Hands' reaper does not stop a run that is still within its claim. None:
    #: the tool's timeout from now
    deadline: datetime | None = None
    #: Collect the run already named for this operation; never start one. A run that is
    #: not there comes back ``absent`` (another Hands collected and removed it, or it was
    #: killed): reconnecting and reaping must never start the action a second time.
    collect_only: bool = False
    #: the session's workspace and the run's artifacts directory as the sandbox mounts
    #: them (host directories named by the operation, ``hands.workspace.mount``); None:
    #: the run mounts nothing
    workspace: RunMount | None = None

    def overdue_at(self) -> datetime:
        return self.deadline or datetime.now(UTC) + timedelta(seconds=self.tool.timeout_s)


class RunOutcome(Frozen):
    """What a finished run did. ``output`` is the parsed stdout (None unless it was
    valid JSON); ``stdout_tail`` keeps the raw end of it for diagnosis."""

    termination: Termination
    exit_code: int | None = None
    output: JsonValue = None
    log_tail: str = ""
    stdout_tail: str = ""
    truncated: bool = False
    container: str
    reconnected: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    detail: str = ""
    #: Nothing was started for this run: the engine refused to create or start it, or
    #: its name is held by a container that is not this deployment's run of this
    #: operation. The operation certainly did not run here (``sandbox_error``; the
    #: reason is in ``detail``).
    refused: bool = False
    #: A ``collect_only`` run found nothing to collect (no container of the operation):
    #: nothing ran here, and what happened is for the store to say.
    absent: bool = False


class RunState(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"


class OwnedRun(Frozen):
    """A container this deployment started, as the reaper sees it."""

    name: str
    operation_id: str
    session_id: str
    mode: DispatchMode
    state: RunState
    deadline: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)


def attempt_environment(spec: RunSpec) -> dict[str, str]:
    """A run's attempt deadline (the store's clock), for the tool to send with its
    requests so that the service can refuse one that arrives late
    (``contracts.attempt``). A query is no attempt: it gets none."""
    if spec.mode is not DispatchMode.RUN or spec.deadline is None:
        return {}
    return {DEADLINE_VARIABLE: spec.deadline.isoformat()}


class StartMissed(BrainhandsError):
    """A run was not started: the claim it would have run under is no longer this
    executor's, or its time to start passed while this executor stalled. Nothing ran."""

    code = "start_missed"
    retryable = True


class CancelledBeforeStart(BrainhandsError):
    """A run was not started: a cancellation was recorded on the operation since it was
    claimed (``record``: the revision that records it). Nothing ran."""

    code = "cancelled_before_start"

    def __init__(self, record: Operation) -> None:
        super().__init__(
            f"operation {record.operation_id} was cancelled before its run started",
            operation_id=record.operation_id,
        )
        self.record = record


class StartGuard(Protocol):
    """What a sandbox asks right before it starts a run (``hands.claim.Claim``): each
    raises ``StartMissed`` or ``CancelledBeforeStart`` to leave it unstarted."""

    async def prove(self) -> None:
        """Read the claim again (I/O): still this executor's, with time left to run."""
        ...

    def check(self) -> None:
        """The last proof, in the thread that makes the engine call (no I/O)."""
        ...

    @property
    def stop_at(self) -> float:
        """When the claim ends, on this host's monotonic clock: the run is stopped by
        then whenever it started."""
        ...


class Sandbox(Protocol):
    async def check(self) -> None:
        """Raise when runs cannot be started now (the engine does not answer)."""
        ...

    async def run(
        self, spec: RunSpec, *, log: Capture | None = None, guard: StartGuard | None = None
    ) -> RunOutcome:
        """Start the run, or reconnect to the one already named for this operation, and
        wait for it to end; the container stays until ``remove``. ``log``, when given,
        is fed the run's stderr as it is written (for previews; a sandbox may not).
        ``guard``, when given, is asked immediately before anything is started (its
        errors propagate, nothing started) and bounds the run's end (``stop_at``)."""
        ...

    async def state(
        self, operation_id: str, mode: DispatchMode = DispatchMode.RUN
    ) -> RunState | None:
        """Whether a container for this run exists, and in which state."""
        ...

    async def kill(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> bool:
        """Kill and remove the run's container; True once it is certainly gone."""
        ...

    async def remove(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> None:
        """Remove an ended run's container (absent is fine)."""
        ...

    async def owned(self) -> list[OwnedRun]:
        """Containers of this deployment (by owner label), for the reaper."""
        ...

    async def image_id(self, image: str) -> str:
        """The local id of ``image`` (``NotFound`` when missing)."""
        ...

    async def image_labels(self, image: str) -> dict[str, Any]:
        """The labels of ``image`` (``NotFound`` when missing)."""
        ...

    async def close(self) -> None: ...
