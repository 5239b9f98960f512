"""Assembling a Hands instance from its settings: store, bus, sandbox, executor, service."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from bus import Bus, BusSettings
from hands.executor import Executor
from hands.metrics import HandsMetrics
from hands.sandbox import Sandbox
from hands.service import ConsumerSettings, HandsService, publisher
from hands.settings import HandsSettings
from hands.workspace.flow import WorkspaceFlow
from lifecycle.decision import LifecycleSettings
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store

log = logging.getLogger(__name__)


@asynccontextmanager
async def open_hands(
    settings: HandsSettings,
    *,
    crash: CrashPoints | None = None,
    metrics: HandsMetrics | None = None,
) -> AsyncIterator[HandsService]:
    """A ready Hands service (``await service.run()``); everything closed on exit."""
    async with AsyncExitStack() as resources:
        store = await open_store(settings.store_url)
        resources.push_async_callback(store.close)
        bus = await Bus.connect(
            BusSettings(url=settings.nats_url, namespace=settings.namespace),
            name=settings.executor_id,
        )
        resources.push_async_callback(bus.close)
        sandbox = await make_sandbox(settings, store, resources)
        executor = Executor(
            store=store,
            sandbox=sandbox,
            publish=publisher(bus),
            executor_id=settings.executor_id,
            crash=crash or CrashPoints.from_env(),
            lifecycle=LifecycleSettings(start_allowance=settings.start_allowance),
            metrics=metrics,
            workspaces=WorkspaceFlow.of(
                store, settings.workspace_root, cache_bytes=settings.workspace_cache_bytes
            ),
        )
        consumer = ConsumerSettings(
            concurrency=settings.concurrency,
            ack_wait=settings.ack_wait,
            max_deliver=settings.max_deliver,
            reap_every=settings.reap_every,
            beat_every=settings.beat_every,
        )
        service = HandsService(bus=bus, executor=executor, settings=consumer)
        resources.push_async_callback(service.shutdown)
        yield service


async def make_sandbox(
    settings: HandsSettings, store: SessionStore, resources: AsyncExitStack
) -> Sandbox:
    if settings.sandbox == "process":
        from hands.sandbox.process import ProcessSandbox

        log.warning(
            "the process sandbox does NOT isolate tools (no network, filesystem or resource "
            "limits): for tests and laptops only"
        )
        return ProcessSandbox(settings.process_root)
    return await _docker_sandbox(settings, store, resources)


async def _docker_sandbox(
    settings: HandsSettings, store: SessionStore, resources: AsyncExitStack
) -> Sandbox:
    """Hardened containers; egress-allowed tools reach only the allowlist proxy."""
    from hands.egress.gateway import EgressGateway
    from hands.egress.policy import GrantPolicy
    from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig

    docker_url = settings.docker_url or "unix:///var/run/docker.sock"

    gateway = EgressGateway(
        docker_url=docker_url,
        secret=settings.proxy_secret(),
        policy=GrantPolicy(store),
        credentials=settings.credentials,
        network=settings.egress_network,
    )
    route = await gateway.start()
    resources.push_async_callback(gateway.close)
    sandbox = DockerSandbox(
        DockerSandboxConfig(
            owner=settings.owner,
            docker_url=docker_url,
            runtime=settings.runtime,
            egress=route,
            warm=settings.warm,
            warm_limit=settings.concurrency,
            warm_memory_bytes=settings.warm_memory_bytes,
            warm_idle=settings.warm_idle,
        )
    )
    await sandbox.check()
    resources.push_async_callback(sandbox.close)
    return sandbox
