"""What a runner gives its phases besides the session: store, tools, model, clock, identity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from brain.metrics import BrainMetrics
from brain.progress import ProgressSettings
from brain.tools import ToolDispatcher
from contracts.workspace import WorkspaceLimits
from lifecycle.decision import LifecycleSettings
from runtime.crashpoints import CrashPoints
from runtime.incarnation import this_process
from session_store import SessionStore

if TYPE_CHECKING:
    from brain.model.client import ModelClient
    from brain.relay import OutboxRelay
    from coordination.ratelimit import ModelLimits


@dataclass(frozen=True)
class Services:
    """Everything phases may use besides the session itself.

    ``runner_id`` names this runner incarnation (an operation attempt's ``executor``, a
    task's ``settled_by``, a claim's holder); ``process`` is the process it runs in
    (``runtime.incarnation``). ``inflight`` holds the operations whose calls this runner
    is making right now. ``lifecycle`` holds the operation lifecycle's settings, the same
    as the Hands' (``lifecycle.decision``: the takeover margin, the attempt limit).
    ``relay`` publishes committed outbox messages (None: no bus; sandboxed tools need
    one). ``limits`` admits model calls under the endpoint's limits shared by all
    Brains.
    """

    store: SessionStore
    tools: ToolDispatcher
    crash: CrashPoints
    clock: Callable[[], datetime]
    runner_id: str
    model: ModelClient | None = None
    relay: OutboxRelay | None = None
    #: the model endpoint's shared request/token limits (None: unlimited here)
    limits: ModelLimits | None = None
    process: str = field(default_factory=this_process)
    inflight: set[str] = field(default_factory=set)
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    #: how often previews of streamed text are written (``brain.progress``)
    progress: ProgressSettings = field(default_factory=ProgressSettings)
    #: what this process counts for Prometheus (``brain.metrics``)
    metrics: BrainMetrics = field(default_factory=BrainMetrics)
    #: the most a session's workspace may hold (an operator setting): every mount of a
    #: call carries it, the Hands refuse a write past it (``contracts.workspace``)
    workspace_limits: WorkspaceLimits = field(default_factory=WorkspaceLimits)
