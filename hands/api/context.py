"""What the API's routes work with: one instance per app, handed to each router."""

from __future__ import annotations

from dataclasses import dataclass, field

from bus import Bus
from hands.executor import Executor
from hands.labels import ToolCaps
from hands.metrics import HandsMetrics
from hands.sandbox import Sandbox
from session_store import SessionStore


@dataclass(frozen=True)
class ApiContext:
    store: SessionStore
    executor: Executor
    sandbox: Sandbox
    #: None: no NATS (cancellations reach only this host's containers; no queue depth)
    bus: Bus | None
    metrics: HandsMetrics
    #: the operator's caps on what an image may declare (``HandsSettings.caps``)
    caps: ToolCaps = field(default_factory=ToolCaps)
