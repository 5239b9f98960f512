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

from brain.agent import agent_kinds
from brain.embedded import run_until_idle
from brain.model.openai import OpenAIChatClient
from brain.model.settings import ModelSettings
from brain.registry import Registry
from brain.runner import DriveReport, SessionRunner
from brain.services import Services
from brain.tools import LocalDispatcher
from contracts import InvalidInput, utcnow
from contracts.model import Frozen
from runtime.crashpoints import CrashPoints
from session_store import open_store

Plugin = Callable[[Registry, LocalDispatcher, AsyncExitStack], Awaitable[None]]


class WorkerSettings(Frozen):
    store_url: str
    session_id: str
    plugins: tuple[str, ...] = ()
    model: ModelSettings | None = None
    root_kind: str = "agent"


def new_runner_id() -> str:
    """Names one incarnation of a Brain process (recorded as ``settled_by``)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def load_plugin(path: str) -> Plugin:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"plugin {path!r} must be written module.path:function")
    plugin: Plugin = getattr(importlib.import_module(module_name), attribute)
    return plugin


async def run_worker(settings: WorkerSettings, *, crash: CrashPoints | None = None) -> DriveReport:
    async with AsyncExitStack() as resources:
        store = await open_store(settings.store_url)
        resources.push_async_callback(store.close)
        registry = Registry()
        for kind in agent_kinds():
            registry.add(kind)
        tools = LocalDispatcher()
        for path in settings.plugins:
            await load_plugin(path)(registry, tools, resources)
        model = None
        if settings.model is not None:
            model = OpenAIChatClient(settings.model)
            resources.push_async_callback(model.aclose)
        services = Services(
            store=store,
            tools=tools,
            crash=crash or CrashPoints.from_env(),
            clock=utcnow,
            runner_id=new_runner_id(),
            model=model,
        )
        runner = SessionRunner(store, registry, services, root_kind=settings.root_kind)
        return await run_until_idle(runner, settings.session_id)
