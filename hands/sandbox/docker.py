"""Hardened Docker containers as the Hands' sandbox.

``run`` is *start or reconnect*: the container is named for the operation
(``container_name``), so whatever executor comes later finds it — running (waited for,
the timeout counted from the container's own start on the engine's clock), exited
(collected), created but never started (started: it never ran) — and only when none
exists creates one. The action is never started twice. Nothing is started before the
executor's claim is proved again (``StartGuard``: a warm container is bound, a created
one started, only after it), and no run outlives that claim (``stop_at``).

Every defense is a flag set on create (``hands.sandbox.hardening``; table in
``docs/hardening.md``): no network (or only the internal egress network), read-only
root, a noexec tmpfs scratch, no capabilities, no-new-privileges, uid 65534,
pids/memory(no swap)/CPU limits, an init that forwards signals, a capped ``local`` log
(raw bytes), no mounts; optionally gVisor (``runsc``).

While a run lasts its stdout is followed and counted (one dedicated thread per run,
never the shared executor: a follow blocks for the whole run); past
``Limits.output_bytes`` the container is killed (``output_limit``), past ``timeout_s``
it is stopped: SIGTERM, SIGKILL after the grace (``timeout``) — ``hands.sandbox.watcher``,
which also collects the stopped container's outcome. A tool with warm containers
(``BH_HANDS_WARM``) runs in one when the pool has one (``hands.sandbox.warm_runs``), and
cold otherwise.

Docker's exceptions end here: a missing image is ``NotFound``; an unreachable or failing
engine ``StoreUnavailable`` (retryable: ``run`` again reconnects); an engine that refuses
a container (create/start failed) is a ``sandbox_error`` outcome
(``hands.sandbox.engine_outcome``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Self, TypeVar

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import requests

from contracts import (
    ConflictError,
    InvalidInput,
    InvalidTransition,
    NotFound,
    OperationMismatch,
    StoreUnavailable,
)
from contracts.tool import DispatchMode, Termination, ToolDefinition
from hands.egress.route import EgressRoute
from hands.sandbox import (
    LABEL_DEADLINE,
    LABEL_MODE,
    LABEL_OPERATION,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_SESSION,
    LABEL_TOOL,
    NAMESPACE,
    OwnedRun,
    RunOutcome,
    RunSpec,
    RunState,
    StartGuard,
    container_name,
    hardening,
)
from hands.sandbox.engine_outcome import (
    STATES,
    absent,
    gone,
    left,
    refused,
    stamp,
    started_at,
    translated,
)
from hands.sandbox.hardening import shared_memory_bytes
from hands.sandbox.output import Capture
from hands.sandbox.pool import WarmPool, pool_key
from hands.sandbox.warm_runs import WarmRuns
from hands.sandbox.watcher import Watcher
from hands.workspace.mount import RunMount

__all__ = ["DockerSandbox", "DockerSandboxConfig", "shared_memory_bytes"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
#: how long removing a container waits for a teardown still under way
_TEARDOWN_S = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class DockerSandboxConfig:
    #: this deployment's namespace: the value of its owner label and the prefix of its
    #: container names (``container_name``); only such containers are touched
    owner: str
    docker_url: str = "unix:///var/run/docker.sock"
    #: e.g. ``runsc`` (gVisor); must be registered with the engine
    runtime: str | None = None
    kill_grace: timedelta = timedelta(seconds=2)
    log_tail_bytes: int = 8 * 1024
    #: how egress-allowed tools reach the proxy; None: such tools are refused
    egress: EgressRoute | None = None
    api_timeout: timedelta = timedelta(seconds=120)
    #: warm containers per tool name (``*``: every tool); empty: every run starts cold
    warm: Mapping[str, int] = field(default_factory=dict)
    #: at most this many warm containers in all (the Hands set their concurrency)
    warm_limit: int = 4
    #: ... and at most this much memory (the sum of their memory limits)
    warm_memory_bytes: int = 512 * 2**20
    #: a warm container nobody binds exits after this long (and is replaced when used)
    warm_idle: timedelta = timedelta(minutes=10)

    def __post_init__(self) -> None:
        if not NAMESPACE.fullmatch(self.owner):
            raise InvalidInput(
                f"sandbox owner (namespace) {self.owner!r} must be 1-63 letters, digits, "
                "'.' or '-', starting with a letter or digit"
            )
        if self.log_tail_bytes < 1 or self.kill_grace < timedelta(0):
            raise InvalidInput("log_tail_bytes must be positive and kill_grace not negative")


class DockerSandbox:
    """The ``Sandbox`` on a Docker engine; ``async with DockerSandbox(config)`` checks the
    engine (and the runtime) up front, otherwise the first call does."""

    def __init__(self, config: DockerSandboxConfig) -> None:
        self.config = config
        self._api = self._client(pool=32)
        self._cpus: float | None = None
        #: the ``VOLUME`` paths of images pinned by id (immutable: asked once per image)
        self._declared: dict[str, list[str]] = {}
        #: whether an image pinned by id declares an ``ENTRYPOINT`` (then no warm runs)
        self._entrypoint: dict[str, bool] = {}
        config = self.config
        self.pool = WarmPool(
            config.warm,
            limit=config.warm_limit,
            memory_bytes=config.warm_memory_bytes,
            idle_s=config.warm_idle.total_seconds(),
        )
        #: runs watched to their end and collected
        self.watcher = Watcher(self)
        #: the warm path: runs in the pool's containers, and the pool's upkeep
        self.warm = WarmRuns(self, self.pool)

    def _client(self, *, pool: int) -> Any:
        return docker.APIClient(
            base_url=self.config.docker_url,
            version="1.41",
            timeout=self.config.api_timeout.total_seconds(),
            max_pool_size=pool,
        )

    async def check(self) -> None:
        """Reach the engine; refuse a configured runtime it does not have."""
        info = await self._call(self._api.info)
        runtimes = sorted(info.get("Runtimes") or {})
        runtime = self.config.runtime
        if runtime is not None and runtime not in runtimes:
            raise InvalidInput(
                f"sandbox runtime {runtime!r} is configured but the docker engine at "
                f"{self.config.docker_url} only has {runtimes}: install it and register it "
                "in daemon.json (`runtimes`), or unset the runtime"
            )
        self._cpus = float(info.get("NCPU") or 1)

    async def __aenter__(self) -> Self:
        await self.check()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop filling the pool — a container being made is finished, not abandoned
        half made — and remove its warm containers (unbound: nothing of an operation is
        lost), then close the engine client."""
        await self.warm.close()
        await asyncio.to_thread(self._api.close)

    # -- run -------------------------------------------------------------------------------

    async def run(
        self, spec: RunSpec, *, log: Capture | None = None, guard: StartGuard | None = None
    ) -> RunOutcome:
        """``log``: the run's stderr is fed to it while the run lasts (previews).
        ``guard``: proved immediately before a warm container is bound or a created one
        started (its errors propagate: nothing started); no run outlives its ``stop_at``.

        A fresh run is created first: a name already taken is what sends it to
        reconnect (inspect, check the labels, start/wait/collect what is there). So a
        cold run asks the engine to create, start and wait, then reads the final state
        and the two logs at once — no inspect before or between."""
        arguments = hardening.arguments(spec)
        name = self._name(spec.operation_id, spec.mode)
        if self._cpus is None:
            await self.check()
        taken = False  # the name is another container's: reconnect to it
        if not spec.collect_only:
            warm = await self.warm.take(spec)
            if warm is not None and guard is not None:
                try:
                    await guard.prove()
                except BaseException:
                    self.warm.pool.give_back(warm)
                    raise
            bound = warm is not None and await self.warm.bind(warm, name)
            if warm is not None and bound == "bound":
                work = self.warm.run(spec, name, warm.id, arguments, log, guard=guard)
                outcome = await self._guarded(name, False, work)
                if not outcome.refused:
                    return outcome
                # It had stopped before its job arrived (an engine restart, its idle
                # limit): the tool never started there. It goes — and the pool's other
                # containers of the tool, likely stopped alike — and the run starts cold.
                await self.warm.retire(warm)
            taken = bound == "taken"
        if not spec.collect_only and not taken:
            try:
                created = await self._create(spec, name, arguments)
            except ConflictError:
                pass  # the name is taken: this run exists (another executor's, or ours)
            except (InvalidInput, StoreUnavailable) as error:
                return refused(name, "the engine refused to create it", error)
            else:
                fresh = self._fresh(spec, name, created, log, guard)
                return await self._guarded(name, False, fresh)
        found = await self._inspect(name)
        if found is None:
            return absent(name) if spec.collect_only else gone(name, True)
        refusal = self._not_ours(found, spec)
        if refusal is not None:
            return refusal
        return await self._guarded(name, True, self._follow(spec, found, log, guard))

    async def _guarded(
        self, name: str, reconnected: bool, work: Coroutine[Any, Any, RunOutcome]
    ) -> RunOutcome:
        """``work``'s outcome; a container removed meanwhile (killed: the run was
        cancelled) is told as gone."""
        try:
            return await work
        except NotFound:
            return gone(name, reconnected)
        except ConflictError:
            # "dead or marked for removal": killed (cancelled) while we collected it
            if await self._removing(name):
                return gone(name, reconnected)
            raise

    # -- cold runs -------------------------------------------------------------------------

    async def _fresh(
        self,
        spec: RunSpec,
        name: str,
        container_id: str,
        log: Capture | None,
        guard: StartGuard | None,
    ) -> RunOutcome:
        """Start the container just created, wait for its end, collect it."""
        try:
            await self._start(container_id, guard)
        except (InvalidInput, StoreUnavailable) as error:
            return refused(name, "the engine refused to start it", error)
        # the timeout counts from the end of the start call: never before the
        # container's own start (which the engine stamps inside that call)
        stop_at = self.stop_at(spec.tool.timeout_s, guard)
        watch = await self.watcher.watch(spec, container_id, stop_at, log)
        return await self.watcher.outcome(spec, container_id, watch, reconnected=False)

    async def _start(self, container_id: str, guard: StartGuard | None) -> None:
        """Start a created container — after the guard's proof, and its last check in
        the very thread that asks the engine (a stall between the two is a stall before
        the start, not after it)."""
        if guard is None:
            await self._call(self._api.start, container_id)
            return
        await guard.prove()

        def start() -> None:
            guard.check()
            self._api.start(container_id)

        await self._call(start)

    async def _follow(
        self,
        spec: RunSpec,
        container: dict[str, Any],
        log: Capture | None,
        guard: StartGuard | None,
    ) -> RunOutcome:
        """Reconnect: start a container that never ran, wait for a running one (its
        timeout counted from its own start, on the engine's clock), collect an exited
        one."""
        started = started_at(container)
        if LABEL_POOL in (container["Config"].get("Labels") or {}):
            return await self.warm.rejoin(spec, container, log, guard)
        stop_at: float | None = None
        if started is None:
            try:
                await self._start(container["Id"], guard)
            except (InvalidInput, StoreUnavailable) as error:
                return refused(container["Name"], "the engine refused to start it", error)
            stop_at = self.stop_at(spec.tool.timeout_s, guard)
            running = True
        else:
            running = bool(container["State"].get("Running"))
        watch = None
        if running:
            if stop_at is None:
                ran = await self.ran_for(started)
                stop_at = self.stop_at(spec.tool.timeout_s - ran, guard)
            watch = await self.watcher.watch(spec, container["Id"], stop_at, log)
        return await self.watcher.outcome(spec, container["Id"], watch, reconnected=True)

    def stop_at(self, seconds: float, guard: StartGuard | None) -> float:
        """When (this process's monotonic clock) a run with ``seconds`` of its timeout
        left is stopped: then, or early enough that its stop's grace still ends within
        the executor's claim — others may act on the operation once the claim is over."""
        stop_at = time.monotonic() + seconds
        if guard is not None:
            stop_at = min(stop_at, guard.stop_at - self.config.kill_grace.total_seconds())
        return stop_at

    async def ran_for(self, since: datetime | None) -> float:
        """Seconds from ``since`` (a stamp of the engine's, e.g. a container's start) to
        now, both on the engine's clock: never this process's wall clock."""
        if since is None:
            return 0.0
        info = await self._call(self._api.info)
        now = stamp(info.get("SystemTime"))
        return 0.0 if now is None else max(0.0, (now - since).total_seconds())

    async def _create(self, spec: RunSpec, name: str, arguments: str) -> str:
        """Create the run's container; its id. ``ConflictError``: the name is taken."""
        tool = spec.tool
        command = tool.query if spec.mode is DispatchMode.QUERY else tool.command
        if spec.mode is DispatchMode.QUERY and command is None:
            raise InvalidInput(f"tool {tool.ref} has no query command")
        image = tool.image_id or tool.image
        try:
            created = await self._call(
                self._api.create_container,
                image,
                command=list(command) if command is not None else None,
                name=name,
                environment=self._environment(spec, arguments),
                labels=hardening.labels(spec, owner=self.config.owner),
                host_config=self._host_config(
                    spec.tool, await self._volumes(image), spec.workspace
                ),
                working_dir=spec.workspace.path if spec.workspace is not None else None,
                **hardening.create_options(kill_grace=self.config.kill_grace),
            )
            return str(created["Id"])
        except NotFound as error:
            raise NotFound(
                f"image {tool.image} ({image}) of tool {tool.ref} is not on the docker engine "
                f"at {self.config.docker_url}: build or load it, then register the tool again",
                image=tool.image,
            ) from error

    def _environment(self, spec: RunSpec, arguments: str) -> dict[str, str]:
        return hardening.environment(spec, arguments, self.config.egress)

    async def _volumes(self, image: str) -> list[str]:
        """The paths an image declares as ``VOLUME`` (each would be a writable anonymous
        volume, past the scratch cap and left on the engine after the run)."""
        if image in self._declared:
            return self._declared[image]
        try:
            found = await self._call(self._api.inspect_image, image)
        except NotFound:
            return []  # create reports the missing image
        config = found.get("Config") or {}
        volumes = sorted(config.get("Volumes") or {})
        if image.startswith("sha256:"):
            self._declared[image] = volumes
            self._entrypoint[image] = bool(config.get("Entrypoint"))
        return volumes

    async def _entrypoint_free(self, image: str) -> bool:
        """Whether an image pinned by id declares no ``ENTRYPOINT``: only then do its runs
        go warm (a warm container's command is the bootstrap, which an entrypoint would
        be handed as arguments). An image not pinned by id: no."""
        if image not in self._entrypoint:
            await self._volumes(image)
        return self._entrypoint.get(image) is False

    def _host_config(
        self, tool: ToolDefinition, volumes: list[str], workspace: RunMount | None = None
    ) -> Any:
        return hardening.host_config(
            self._api,
            tool,
            volumes,
            egress=self.config.egress,
            cpus=self._cpus,
            runtime=self.config.runtime,
            workspace=workspace,
        )

    def _not_ours(self, container: dict[str, Any], spec: RunSpec) -> RunOutcome | None:
        """A refusal when the container holding the run's name is not this deployment's
        run of this operation (None: it is ours). Nothing is started or touched."""
        labels = container["Config"].get("Labels") or {}
        expected = {
            LABEL_OWNER: self.config.owner,
            LABEL_OPERATION: spec.operation_id,
            LABEL_MODE: spec.mode.value,
            LABEL_TOOL: spec.tool.ref,
        }
        if LABEL_POOL in labels:  # a warm container bound by its name: no operation label
            expected[LABEL_POOL] = pool_key(spec.tool)
            del expected[LABEL_OPERATION]
        wrong = {
            key: labels.get(key) for key, value in expected.items() if labels.get(key) != value
        }
        if not wrong:
            return None
        name = container["Name"].lstrip("/")
        detail = (
            f"container {name} exists but is not this deployment's run of "
            f"{spec.operation_id} ({spec.tool.ref}): labels {wrong}; nothing was started"
        )
        log.error("%s", detail)
        return RunOutcome(
            termination=Termination.SANDBOX_ERROR, container=name, detail=detail, refused=True
        )

    # -- the rest of the protocol ----------------------------------------------------------

    async def state(
        self, operation_id: str, mode: DispatchMode = DispatchMode.RUN
    ) -> RunState | None:
        found = await self._inspect(self._name(operation_id, mode))
        return None if found is None else STATES.get(found["State"]["Status"], RunState.EXITED)

    async def kill(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> bool:
        name = self._name(operation_id, mode)
        found = await self._owned(name)
        if found is not None:
            with contextlib.suppress(NotFound, ConflictError):  # gone, or already going
                await self._call(self._api.remove_container, found["Id"], force=True, v=True)
        deadline = time.monotonic() + self.config.api_timeout.total_seconds()
        delay = 0.05
        while await self._inspect(name) is not None:
            if left(deadline) <= 0:
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        self.warm.repay(operation_id)
        return True

    async def remove(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> None:
        name = self._name(operation_id, mode)
        found = await self._owned(name)
        if found is None:
            self.warm.repay(operation_id)
            return
        if found["State"].get("Running"):
            # a warm run is done once its trailers arrived, while the engine may still
            # be tearing its container down: that is waited for, a little
            try:
                await self.watcher.stopped(found["Id"], within=_TEARDOWN_S)
            except StoreUnavailable:
                raise InvalidTransition(
                    f"container {name} is still running: kill it instead"
                ) from None
        with contextlib.suppress(NotFound, ConflictError):
            await self._call(self._api.remove_container, found["Id"], force=True, v=True)
        self.warm.repay(operation_id)

    async def owned(self) -> list[OwnedRun]:
        rows = await self._call(
            self._api.containers, all=True, filters={"label": f"{LABEL_OWNER}={self.config.owner}"}
        )
        runs = []
        bound = f"bh-{self.config.owner}_"
        for row in rows:
            labels = row.get("Labels") or {}
            try:
                name = row["Names"][0].lstrip("/")
                if LABEL_POOL in labels and not name.startswith(bound):
                    continue  # a warm container nobody bound: the pool's, not a run
                if LABEL_POOL in labels:  # bound: its operation is its name
                    labels = {**labels, LABEL_OPERATION: name[len(bound) :], LABEL_SESSION: ""}
                runs.append(
                    OwnedRun(
                        name=name,
                        operation_id=labels[LABEL_OPERATION],
                        session_id=labels[LABEL_SESSION],
                        mode=DispatchMode(labels[LABEL_MODE]),
                        state=STATES.get(row["State"], RunState.EXITED),
                        deadline=stamp(labels.get(LABEL_DEADLINE)),
                        labels=labels,
                    )
                )
            except (KeyError, IndexError, ValueError) as error:
                log.warning("container %s has malformed labels: %r", row.get("Names"), error)
        return runs

    async def image_id(self, image: str) -> str:
        return str((await self._image(image))["Id"])

    async def image_labels(self, image: str) -> dict[str, Any]:
        return dict(((await self._image(image)).get("Config") or {}).get("Labels") or {})

    # -- engine calls ----------------------------------------------------------------------

    def _name(self, operation_id: str, mode: DispatchMode) -> str:
        name = container_name(operation_id, mode, namespace=self.config.owner)
        if not _NAME.fullmatch(name):
            raise InvalidInput(
                f"operation id {operation_id!r} gives container name {name!r}, which Docker "
                "refuses (allowed: letters, digits, '_', '.', '-')"
            )
        return name

    async def _image(self, image: str) -> dict[str, Any]:
        try:
            return dict(await self._call(self._api.inspect_image, image))
        except NotFound as error:
            raise NotFound(f"image {image} is not on the docker engine", image=image) from error

    async def _owned(self, name: str) -> dict[str, Any] | None:
        """The container ``name`` when this deployment owns it; refuses another's."""
        found = await self._inspect(name)
        owner = found and (found["Config"].get("Labels") or {}).get(LABEL_OWNER)
        if found is not None and owner != self.config.owner:
            raise OperationMismatch(
                f"container {name} belongs to owner {owner!r}, not {self.config.owner!r}"
            )
        return found

    async def _inspect(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self._call(self._api.inspect_container, name))
        except NotFound:
            return None

    async def _removing(self, name: str) -> bool:
        found = await self._inspect(name)
        return found is None or found["State"]["Status"] in ("removing", "dead")

    async def _inspect_id(self, container_id: str) -> dict[str, Any]:
        return dict(await self._call(self._api.inspect_container, container_id))

    async def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One blocking engine call in a worker thread, its errors translated."""
        try:
            return await asyncio.to_thread(method, *args, **kwargs)
        except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
            raise translated(error, f"docker engine at {self.config.docker_url}") from error
