"""Tools as container images: the definition a registry keeps, and the image contract.

A tool image declares itself in labels under ``io.brainhands.tool.`` (``LABELS``); the
registry reads them once, pins the image by its id, and keeps the result as a
``ToolDefinition`` — registered once per ``name@version``. Both services read definitions
from the registry: the Brain for schemas and replay policy, the Hands to run them.

A registered definition changes only by revisions (``ToolRevision``, create-once, each
with who, when, what and why): an image rebuilt from the same recipe (the
``io.brainhands.recipe`` label, ``RECIPE_LABEL``) replaces the pinned image id, and an
operator may change the network grant. Everything else a version declares is fixed.

How a container meets its executor (the I/O contract, see ``docs/tools.md``):

* environment: ``BH_OPERATION_ID`` (the idempotency key), ``BH_ARGUMENTS`` (the frozen
  arguments, JSON), ``BH_MODE`` (``run`` or ``query``); with a workspace mounted,
  ``BH_WORKSPACE`` (where it is) and ``BH_ARTIFACTS`` (an empty directory whose files
  become the result's artifacts, ``docs/workspaces.md``); with network allowed also
  ``HTTP_PROXY``/``HTTPS_PROXY`` (and lower-case twins) naming the egress proxy; the
  definition's ``config`` (non-secret settings chosen at registration). No secrets:
  credentials for an allowed destination are added by the egress proxy.
* stdout: one JSON document, the tool's output (query mode:
  ``{"found": bool, "output": ...}``); stderr: logs, kept as a capped tail.
* exit status 0: succeeded; 75 (EX_TEMPFAIL): the tool cannot tell whether its action
  happened (e.g. the response was lost) — the outcome is unknown and is recovered by
  the replay policy; anything else: failed (stdout may carry an error object).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, StringConstraints

from contracts.model import AwareDatetime, Frozen, OperationId, SessionId, TaskId, utcnow
from contracts.operation import ReplayPolicy
from contracts.question import ApprovalRule
from contracts.workspace import WorkspaceAccess, WorkspaceMount

TOOL_RECORD_VERSION: Final = 1
#: Largest frozen arguments of a sandboxed call: they travel in the container's env.
MAX_ARGUMENT_BYTES: Final = 64 * 1024
LABEL_PREFIX: Final = "io.brainhands.tool."
#: The digest of the recipe an image was built from (its directory's files, not its
#: base): images with the same digest run the same code. Set by ``bh images build``.
RECIPE_LABEL: Final = "io.brainhands.recipe"
#: The hash of the recipe and the base image together: ``bh images build`` never makes
#: two images with one build hash (it skips the second build).
BUILD_HASH_LABEL: Final = "io.brainhands.build-hash"

ToolName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
# An egress destination: host:port (a name or an IPv4 address, never a wildcard).
Destination = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?:[0-9]{1,5}$")
]


def _not_reserved(name: str) -> str:
    if name.startswith("BH_") or name.upper() in _PROXY_VARIABLES:
        raise ValueError(f"{name} is set by the executor; choose another name")
    return name


_PROXY_VARIABLES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"})

# A config variable's name: upper case, not in the ``BH_`` namespace the executor owns.
ConfigName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Z][A-Z0-9_]{0,63}$"),
    AfterValidator(_not_reserved),
]


#: The exit status of a tool that cannot tell whether its action happened (e.g. the
#: response was lost): the outcome is unknown, not failed (EX_TEMPFAIL).
EXIT_UNKNOWN = 75


class Termination(StrEnum):
    """Why a sandboxed run ended, as the executor observed it."""

    EXITED = "exited"
    TIMEOUT = "timeout"
    OOM_KILLED = "oom_killed"
    CANCELLED = "cancelled"
    OUTPUT_LIMIT = "output_limit"
    INVALID_OUTPUT = "invalid_output"
    SANDBOX_ERROR = "sandbox_error"
    #: killed by a signal the executor did not send (the engine stopping, an operator's
    #: ``docker stop``): whether its effect happened is unknown, as with exit 75
    INTERRUPTED = "interrupted"


class Limits(Frozen):
    """Resources of one sandboxed run."""

    cpus: float = Field(default=1.0, gt=0, le=64)
    memory_bytes: int = Field(default=256 * 2**20, ge=16 * 2**20)
    pids: int = Field(default=64, ge=8, le=4096)
    scratch_bytes: int = Field(default=64 * 2**20, ge=2**20)
    output_bytes: int = Field(default=2**20, ge=1024)


class NetworkPolicy(Frozen):
    """``allow`` empty: no network at all. Otherwise egress to exactly these
    destinations, through the Hands' proxy."""

    allow: tuple[Destination, ...] = ()

    @property
    def is_none(self) -> bool:
        return not self.allow


class ToolDefinition(Frozen):
    """A registered tool: an image pinned by id, and what its labels declared."""

    v: Literal[1] = TOOL_RECORD_VERSION
    type: Literal["tool"] = "tool"
    name: ToolName
    version: int = Field(ge=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    replay: ReplayPolicy = ReplayPolicy.UNSAFE
    timeout_s: float = Field(default=60.0, gt=0, le=7 * 86400)
    limits: Limits = Limits()
    network: NetworkPolicy = NetworkPolicy()
    command: tuple[str, ...] | None = None
    query: tuple[str, ...] | None = None
    #: its calls need a person's approval first (label ``io.brainhands.tool.approval``)
    approval: ApprovalRule | None = None
    #: how it mounts its session's workspace (label ``io.brainhands.tool.workspace``:
    #: ``rw``, ``ro``, optionally with a path, e.g. ``rw:/work``; default: not at all)
    workspace: WorkspaceAccess = WorkspaceAccess()
    #: non-secret settings given at registration, passed to the container as environment
    config: dict[ConfigName, str] = Field(default_factory=dict)
    image: str
    image_id: str
    #: ``RECIPE_LABEL`` of the image; None: unknown (only this image id is this version)
    recipe: str | None = Field(default=None, min_length=1, max_length=200)
    #: ``BUILD_HASH_LABEL`` of the image, if it has one
    build: str | None = Field(default=None, min_length=1, max_length=200)
    #: which revision of ``name@version`` this is (1: as registered)
    revision: int = Field(default=1, ge=1)
    registered_by: str = ""
    registered_at: AwareDatetime = Field(default_factory=utcnow)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def queryable(self) -> bool:
        return self.query is not None

    def same_image(self, other: ToolDefinition) -> bool:
        """Whether registering ``other`` again changes nothing (same name, version, image)."""
        return (self.name, self.version, self.image_id) == (
            other.name,
            other.version,
            other.image_id,
        )

    def same_recipe(self, other: ToolDefinition) -> bool:
        """Whether ``other`` is this version built again from the same recipe (both
        images declare it; without a recipe on both sides nothing says so). Not when
        both declare one build hash too: no build makes a second image of one recipe on
        one base, but an image built ``FROM`` this one inherits its labels."""
        if self.recipe is None or (self.name, self.version, self.recipe) != (
            other.name,
            other.version,
            other.recipe,
        ):
            return False
        return self.build is None or self.build != other.build


class ToolChange(StrEnum):
    """What made a revision of a registered tool."""

    REGISTERED = "registered"
    #: the image was rebuilt from the same recipe: a new image id
    REBUILT = "rebuilt"
    #: an operator changed the network grant
    GRANT = "grant"


class ToolRevision(Frozen):
    """One revision of ``name@version``: the definition from then on, and who changed
    what, when and why. Create-once per revision number: of two changes made at once,
    one is refused."""

    v: Literal[1] = TOOL_RECORD_VERSION
    type: Literal["tool_revision"] = "tool_revision"
    definition: ToolDefinition
    change: ToolChange
    by: str = Field(default="", max_length=400)
    at: AwareDatetime = Field(default_factory=utcnow)
    reason: str = Field(default="", max_length=1000)
    #: what changed, in words (e.g. ``allow: a:80 -> b:80``)
    detail: str = ""

    @property
    def rev(self) -> int:
        return self.definition.revision


class DispatchMode(StrEnum):
    RUN = "run"
    QUERY = "query"


class Dispatch(Frozen):
    """``tools.dispatch``: run an operation, committed as the operation's intent.

    The message id on the bus is ``operation_id``: a repeat is the same operation, never
    a second action. (Queries are the Hands' own recovery and verify steps.) Its ids are
    identifiers (``contracts.model``), as on every message of the bus: one with another
    id can never become valid, and its door refuses it once.
    """

    v: Literal[1] = 1
    type: Literal["dispatch"] = "dispatch"
    operation_id: OperationId
    session_id: SessionId
    task_id: TaskId | None = None
    tool: ToolName
    tool_version: int = Field(ge=1)
    args: Any = None
    replay: ReplayPolicy = ReplayPolicy.UNSAFE
    committed_at: AwareDatetime = Field(default_factory=utcnow)
    #: the session whose log committed this dispatch, when it is not the operation's own:
    #: a fork making a call it inherited from the session it was forked from. The Hands
    #: look for the intent there, and announce the result to it too
    via: SessionId | None = None
    #: the trace context of the Brain's ``execute_tool`` span (W3C ``traceparent``): the
    #: Hands' spans join the Brain's trace (``runtime.tracing``); never read otherwise
    trace: dict[str, str] = Field(default_factory=dict, max_length=4)
    #: the session's workspace as this call mounts it, frozen in its intent: mode, path,
    #: the version it starts from and the limits (None: the call mounts no workspace).
    #: A replay starts from the same base, so it sees the same files
    workspace: WorkspaceMount | None = None


class Cancellation(Frozen):
    """``tools.cancel``: a cancellation already recorded in the store; the broadcast only
    shortens the wait of the Hands whose host runs the operation (they check the store)."""

    v: Literal[1] = 1
    type: Literal["cancel"] = "cancel"
    operation_id: OperationId
    session_id: SessionId
    reason: str = "cancelled"
    #: what the canceller knows of the call (so a cancel that comes before any Hands
    #: recorded the operation can record it, cancelled, in its place)
    task_id: TaskId | None = None
    tool: str | None = None


class ResultEvent(Frozen):
    """``tools.results``: an operation's result is in the store (the store is the truth;
    the event is a hint to wake the session)."""

    v: Literal[1] = 1
    type: Literal["result"] = "result"
    operation_id: OperationId
    session_id: SessionId
    succeeded: bool
    termination: Termination | None = None
