"""``bh init``: a deployment's one-shot init job — the store, the bus's streams and the
declared tools in place. Every service of a deployment waits for it to have succeeded
(compose: ``service_completed_successfully``; Kubernetes: a Job).

Three steps, each idempotent, so running it again is a no-op and running it after a
change applies only the change:

1. **store**: the file, bucket or table behind ``BH_STORE_URL`` (``bh store init``);
2. **streams**: the JetStream streams of the namespace at ``--replicas`` copies (3 on a
   three-node cluster; an existing stream is scaled to it), then checked: each stream
   has that many replicas and a leader. Services ensure the streams too, but keep the
   replicas a stream has (``bus.BusSettings.replicas``);
3. **tools**: the images of a declared list registered, granted as declared
   (``bh.declared_tools``); needs the Docker engine that holds the images.

One line per step on stdout; a failure is one line on stderr, ``bh init: <step>:
<code>: <message>``, exit status 2. While the store, NATS or the engine do not answer
yet (a deployment starting), a step is retried until ``--wait`` runs out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Annotated, TypeVar
from urllib.parse import urlsplit

import typer

from bh.declared_tools import apply_declared, read_declared
from bus import Bus, BusSettings
from contracts import BrainhandsError, StoreUnavailable
from hands.api.views import RegisterRequest
from hands.labels import ToolCaps
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from hands.settings import HandsSettings
from session_store import SessionStore, open_store

_T = TypeVar("_T")
#: between tries of a step whose server does not answer yet
_RETRY_EVERY = 2.0


class StepFailed(Exception):
    """A step failed for good: its name and the project error."""

    def __init__(self, step: str, error: BrainhandsError) -> None:
        super().__init__(f"{step}: {error.code}: {error.message}")


def init(
    store: Annotated[
        str, typer.Option(envvar="BH_STORE_URL", help="Session Store URL", show_envvar=True)
    ],
    nats: Annotated[
        str | None,
        typer.Option(envvar="BH_NATS_URL", help="NATS URL (no streams without)", show_envvar=True),
    ] = None,
    namespace: Annotated[str, typer.Option(envvar="BH_NAMESPACE", help="bus namespace")] = "bh",
    replicas: Annotated[
        int,
        typer.Option(
            envvar="BH_NATS_REPLICAS", min=1, max=5, help="copies of each stream (3: R3 cluster)"
        ),
    ] = 1,
    tools: Annotated[
        Path | None,
        typer.Option(envvar="BH_INIT_TOOLS", help="TOML/JSON list of tool images to register"),
    ] = None,
    docker_host: Annotated[
        str | None, typer.Option(envvar="DOCKER_HOST", help="engine holding the tool images")
    ] = None,
    wait: Annotated[
        float, typer.Option(envvar="BH_INIT_WAIT", help="seconds to wait for servers to answer")
    ] = 120.0,
) -> None:
    """The deployment's init job: store, streams and declared tools in place (idempotent)."""
    settings = BusSettings(url=nats, namespace=namespace, replicas=replicas) if nats else None
    deadline = time.monotonic() + wait
    # nats-py's reconnect attempts would be one warning each: "waiting" says it once
    logging.getLogger("bus.jetstream").setLevel(logging.ERROR)
    try:
        asyncio.run(_init(store, settings, tools, docker_host, deadline))
    except StepFailed as failed:
        typer.echo(f"bh init: {failed}", err=True)
        raise typer.Exit(2) from None


async def _init(
    url: str,
    bus: BusSettings | None,
    tools: Path | None,
    docker_host: str | None,
    deadline: float,
) -> None:
    declared = _step("tools", lambda: read_declared(tools)) if tools is not None else []
    store = await _retried("store", deadline, lambda: open_store(url, create=True))
    try:
        _say(f"store: ready ({_where(url)})")
        if bus is not None:
            _say(await _retried("streams", deadline, lambda: _streams(bus, deadline)))
        if tools is not None and declared:
            caps = _step("tools", lambda: HandsSettings.from_env(store_url=url).caps)
            await _register(store, declared, tools, docker_host, deadline, caps)
    finally:
        await store.close()


async def _register(
    store: SessionStore,
    declared: list[RegisterRequest],
    source: Path,
    docker_host: str | None,
    deadline: float,
    caps: ToolCaps,
) -> None:
    engine = docker_host or "unix:///var/run/docker.sock"
    sandbox = await _retried("tools", deadline, lambda: _engine(engine))
    try:
        for entry in declared:
            why = f"declared in {source}"
            register = partial(apply_declared, store, sandbox, entry, reason=why, caps=caps)
            _say((await _retried("tools", deadline, register)).line())
    finally:
        await sandbox.close()


async def _streams(settings: BusSettings, deadline: float) -> str:
    """Ensure the streams (at ``settings.replicas``) and check them: that many replicas,
    a leader elected."""
    left = max(deadline - time.monotonic(), 1.0)
    try:  # a first connect is retried forever by nats-py: the deadline ends it
        # the operator's run: a stream that differs is updated to this deployment's
        connecting = Bus.connect(settings, name="bh-init", align=True)
        bus = await asyncio.wait_for(connecting, timeout=left)
    except TimeoutError:
        unanswered = StoreUnavailable(f"NATS did not answer in {left:.0f} s")
        raise StepFailed("streams", unanswered) from None
    try:
        found = await bus.replicas()
    finally:
        await bus.close()
    for name, (copies, leader) in found.items():
        if copies != settings.replicas or not leader:
            raise StoreUnavailable(
                f"stream {name} has {copies} replicas (want {settings.replicas}) and "
                f"leader {leader or 'none yet'}"
            )
    replicas = "1 replica" if settings.replicas == 1 else f"{settings.replicas} replicas"
    return f"streams: {', '.join(found)} at {replicas}"


async def _engine(docker_url: str) -> DockerSandbox:
    """The engine, to read the images' labels and ids (it starts no container)."""
    sandbox = DockerSandbox(DockerSandboxConfig(owner="bh-init", docker_url=docker_url))
    await sandbox.check()
    return sandbox


async def _retried(step: str, deadline: float, attempt: Callable[[], Awaitable[_T]]) -> _T:
    """``attempt`` until it succeeds, retrying what may pass (a server not up yet)
    until ``deadline``; a failure as ``StepFailed``."""
    said = False
    while True:
        try:
            return await attempt()
        except BrainhandsError as error:
            if not error.retryable or time.monotonic() + _RETRY_EVERY > deadline:
                raise StepFailed(step, error) from None
            if not said:
                _say(f"{step}: waiting ({error.code}: {error.message})")
                said = True
        await asyncio.sleep(_RETRY_EVERY)


def _step(step: str, run: Callable[[], _T]) -> _T:
    try:
        return run()
    except BrainhandsError as error:
        raise StepFailed(step, error) from None


def _where(url: str) -> str:
    """The store's location without its query (which may name an endpoint)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _say(line: str) -> None:
    typer.echo(line)
