"""An embedded Brain worker process: everything needed to run one session to idle.

Builds the registry (built-in agent kinds plus plugins), the tool dispatcher, the model
client and the store from settings, then drives the session until it is finished or
cannot move by itself. Plugins are ``module:function`` paths to coroutines
``plugin(registry, tools, resources)`` that register task kinds and tools; resources is
an ``AsyncExitStack`` for anything they must close.
"""

from __future__ import annotations

import importlib
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from brain.agent import agent_kinds
from brain.doctor import doctor_kind
from brain.embedded import run_until_idle
from brain.metrics import BrainMetrics
from brain.model.metered import MeteredModel
from brain.model.openai import OpenAIChatClient
from brain.model.settings import ModelSettings
from brain.progress import ProgressSettings
from brain.registry import Registry
from brain.relay import OutboxRelay
from brain.results import ResultWaiter
from brain.runner import DriveReport, SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher
from bus import Bus, BusSettings
from contracts import InvalidInput
from contracts.model import Frozen
from contracts.question import ApprovalRule
from contracts.workspace import WorkspaceLimits
from coordination.ratelimit import ModelLimits
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store

Plugin = Callable[[Registry, LocalDispatcher, AsyncExitStack], Awaitable[None]]


class BrainSettings(Frozen):
    """What every Brain process builds once: store, task kinds and tools, model, bus."""

    store_url: str
    plugins: tuple[str, ...] = ()
    model: ModelSettings | None = None
    root_kind: str = "agent"
    #: the bus (sandboxed tools need it): dispatches go out, result events come in
    bus: BusSettings | None = None
    #: registered tools to run on the Hands (newest version), replacing in-process ones
    sandboxed: tuple[str, ...] = ()
    #: tool calls that need a person's approval (besides tools that declare it)
    approvals: tuple[ApprovalRule, ...] = ()
    #: the most a session's workspace may hold (``BH_WORKSPACE_MAX_BYTES``, ``…_FILES``)
    workspace_limits: WorkspaceLimits = WorkspaceLimits()


class WorkerSettings(BrainSettings):
    """``python -m brain run``: one session, to idle, in this process."""

    session_id: str


def new_runner_id() -> str:
    """Names one incarnation of a Brain process (recorded as ``settled_by``)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def load_plugin(path: str) -> Plugin:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"plugin {path!r} must be written module.path:function")
    plugin: Plugin = getattr(importlib.import_module(module_name), attribute)
    return plugin


@dataclass(frozen=True)
class Built:
    store: SessionStore
    runner: SessionRunner
    bus: Bus | None


async def build(
    settings: BrainSettings,
    resources: AsyncExitStack,
    *,
    crash: CrashPoints | None = None,
    limits: ModelLimits | None = None,
) -> Built:
    """Open and assemble everything a Brain needs; ``resources`` closes it all."""
    store = await open_store(settings.store_url)
    resources.push_async_callback(store.close)
    registry = Registry()
    for kind in [*agent_kinds(approvals=settings.approvals), doctor_kind()]:
        registry.add(kind)
    tools = LocalDispatcher()
    for path in settings.plugins:
        await load_plugin(path)(registry, tools, resources)
    await _use_sandboxed(store, tools, settings.sandboxed)
    metrics = BrainMetrics()
    model = None
    if settings.model is not None:
        model = MeteredModel(OpenAIChatClient(settings.model), metrics, settings.model.model)
        resources.push_async_callback(model.aclose)
    crash = crash or CrashPoints.from_env()
    bus = None
    if settings.bus is not None:
        bus = await Bus.connect(settings.bus, name="brain")
        resources.push_async_callback(bus.close)
    elif settings.sandboxed:
        raise InvalidInput("sandboxed tools need the bus: set BH_NATS_URL")
    services = Services(
        store=store,
        tools=tools,
        crash=crash,
        # the store's time: what every deadline another process judges is written on
        # (task sleeps, question and attempt deadlines; invariant 17)
        clock=store.clock.now,
        runner_id=new_runner_id(),
        model=model,
        relay=None if bus is None else OutboxRelay(bus, crash, store),
        limits=limits,
        progress=_progress(settings.model),
        metrics=metrics,
        workspace_limits=settings.workspace_limits,
    )
    runner = SessionRunner(store, registry, services, root_kind=settings.root_kind)
    return Built(store, runner, bus)


def _progress(model: ModelSettings | None) -> ProgressSettings:
    if model is None:
        return ProgressSettings()
    return ProgressSettings(interval=model.preview_interval, max_chars=model.preview_chars)


async def run_worker(settings: WorkerSettings, *, crash: CrashPoints | None = None) -> DriveReport:
    async with AsyncExitStack() as resources:
        built = await build(settings, resources, crash=crash)
        if built.bus is None:
            return await run_until_idle(built.runner, settings.session_id)
        async with ResultWaiter(built.bus, settings.session_id) as results:
            return await run_until_idle(built.runner, settings.session_id, results=results)


async def _use_sandboxed(
    store: SessionStore, tools: LocalDispatcher, names: tuple[str, ...]
) -> None:
    for name in names:
        definition = await store.tools.get(name)
        if definition is None:
            raise InvalidInput(
                f"tool {name!r} is not registered; register its image with `bh tools register`"
            )
        tools.add_sandboxed(definition)
