"""Hardened Docker containers as the Hands' sandbox.

``run`` is *start or reconnect*: the container is named for the operation
(``container_name``), so whatever executor comes later finds it — running (waited for,
the timeout counted from the container's own start), exited (collected), created but
never started (started: it never ran) — and only when none exists creates one. The
action is never started twice.

Every defense is a flag set in ``_host_config`` (table in ``docs/hardening.md``): no
network (or only the internal egress network), read-only root, a noexec tmpfs scratch,
no capabilities, no-new-privileges, uid 65534, pids/memory(no swap)/CPU limits, an init
that forwards signals, a capped ``local`` log (raw bytes), no mounts; optionally gVisor (``runsc``).

While a run lasts its stdout is followed and counted (one dedicated thread per run,
never the shared executor: a follow blocks for the whole run); past
``Limits.output_bytes`` the container is killed (``output_limit``), past
``timeout_s`` it is stopped: SIGTERM, SIGKILL after the grace (``timeout``).

Docker's exceptions end here: a missing image is ``NotFound``; an unreachable or failing
engine ``StoreUnavailable`` (retryable: ``run`` again reconnects); an engine that refuses
a container (create/start failed) is a ``sandbox_error`` outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Self, TypeVar

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import docker.types  # type: ignore[import-untyped]
import requests
from pydantic import JsonValue

from contracts import (
    BrainhandsError,
    ConflictError,
    InvalidInput,
    InvalidTransition,
    NotFound,
    OperationMismatch,
    PayloadTooLarge,
    StoreUnavailable,
)
from contracts.tool import MAX_ARGUMENT_BYTES, DispatchMode, Termination
from hands.egress.route import EgressRoute
from hands.sandbox import (
    LABEL_DEADLINE,
    LABEL_MODE,
    LABEL_OPERATION,
    LABEL_OWNER,
    LABEL_SESSION,
    LABEL_TOOL,
    NAMESPACE,
    OwnedRun,
    RunOutcome,
    RunSpec,
    RunState,
    container_name,
)
from hands.sandbox.output import Capture, judge

log = logging.getLogger(__name__)
T = TypeVar("T")

LABEL_EXECUTOR = "io.brainhands.executor"
SANDBOX_USER = "65534:65534"
# Egress containers resolve nothing themselves (the proxy does). Docker < 26 forwards
# the embedded DNS of internal networks to the host's resolvers (CVE-2024-29018), from
# the host's namespace when they are loopback (127/8). The one upstream configured is
# the unspecified address: not loopback to Docker, so it is asked from the container's
# own namespace, where it means the container itself — no other host, whatever network
# the engine sits on (a "documentation" address may be a real neighbour).
_DNS_NOWHERE = "0.0.0.0"
#: The image's volumes are masked by this: empty, read-only, tiny (no anonymous volume).
_MASK = "ro,size=4k,mode=0555,noexec,nosuid,nodev"
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
_NEVER = datetime(1, 1, 1, tzinfo=UTC)
_STATES = {
    "created": RunState.CREATED,
    "running": RunState.RUNNING,
    "paused": RunState.RUNNING,
    "restarting": RunState.RUNNING,
    "removing": RunState.EXITED,
    "exited": RunState.EXITED,
    "dead": RunState.EXITED,
}
_SIGNALLED = (128 + 9, 128 + 15)


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

    def __post_init__(self) -> None:
        if not NAMESPACE.fullmatch(self.owner):
            raise InvalidInput(
                f"sandbox owner (namespace) {self.owner!r} must be 1-63 letters, digits, "
                "'.' or '-', starting with a letter or digit"
            )
        if self.log_tail_bytes < 1 or self.kill_grace < timedelta(0):
            raise InvalidInput("log_tail_bytes must be positive and kill_grace not negative")


class _Follower:
    """Follows a container's stdout (or, with ``err``, stderr) log in a thread of its
    own until the container stops, the capture is full, or ``cancel`` (which leaves the
    container alone)."""

    def __init__(self, api: Any, container_id: str, capture: Capture, *, err: bool = False) -> None:
        self._api, self._id, self._capture, self._err = api, container_id, capture, err
        self._lock = threading.Lock()
        self._stream: Any = None
        self._cancelled = self._cancelled_by_caller = False
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        threading.Thread(
            target=self._run, name=f"bh-follow-{container_id[:12]}", daemon=True
        ).start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            stream = self._api.logs(
                self._id, stdout=not self._err, stderr=self._err, stream=True, follow=True
            )
            with self._lock:
                self._stream = stream
                if self._cancelled:
                    return
            for chunk in stream:
                if not self._capture.feed(chunk):
                    break
        except BaseException as failure:  # reported to the loop, which decides
            error = failure
        finally:
            self.cancel()
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self._loop.call_soon_threadsafe(self._settle, error)

    def _settle(self, error: BaseException | None) -> None:
        if not self.done.done():
            if error is None or self._cancelled_by_caller:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)

    def cancel(self, *, by_caller: bool = False) -> None:
        with self._lock:
            self._cancelled = True
            self._cancelled_by_caller |= by_caller
            stream, self._stream = self._stream, None
        if stream is not None:
            _close_stream(stream)


@dataclass(slots=True)
class _Watch:
    """What watching a live run saw (absent when an exited container is collected)."""

    capture: Capture
    timed_out: bool = False
    over_limit: bool = False
    notes: list[str] = field(default_factory=list)


class DockerSandbox:
    """The ``Sandbox`` on a Docker engine; ``async with DockerSandbox(config)`` checks the
    engine (and the runtime) up front, otherwise the first call does."""

    def __init__(self, config: DockerSandboxConfig) -> None:
        self.config = config
        self._api = self._client(pool=32)
        self._cpus: float | None = None
        #: the ``VOLUME`` paths of images pinned by id (immutable: asked once per image)
        self._declared: dict[str, list[str]] = {}

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
        await asyncio.to_thread(self._api.close)

    # -- run -------------------------------------------------------------------------------

    async def run(self, spec: RunSpec, *, log: Capture | None = None) -> RunOutcome:
        """``log``: the run's stderr is fed to it while the run lasts (previews)."""
        arguments = _arguments(spec)
        name = self._name(spec.operation_id, spec.mode)
        if self._cpus is None:
            await self.check()
        found = await self._inspect(name)
        reconnected = found is not None
        if found is None and spec.collect_only:
            return _absent(name)
        if found is None:
            try:
                await self._create(spec, name, arguments)
            except ConflictError:
                reconnected = True  # another executor created it just now
            except (InvalidInput, StoreUnavailable) as error:
                return _refused(name, "the engine refused to create it", error)
            found = await self._inspect(name)
            if found is None:
                return _gone(name, reconnected)
        refusal = self._not_ours(found, spec)
        if refusal is not None:
            return refusal
        try:
            return await self._follow(spec, found, reconnected, log)
        except NotFound:
            return _gone(name, reconnected)
        except ConflictError:
            # "dead or marked for removal": killed (cancelled) while we collected it
            if await self._removing(name):
                return _gone(name, reconnected)
            raise

    async def _follow(
        self, spec: RunSpec, container: dict[str, Any], reconnected: bool, log: Capture | None
    ) -> RunOutcome:
        """Start a container that never ran, wait for a running one, collect it."""
        if _started(container) is None:
            try:
                await self._call(self._api.start, container["Id"])
            except (InvalidInput, StoreUnavailable) as error:
                return _refused(container["Name"], "the engine refused to start it", error)
            container = await self._inspect_id(container["Id"])
        running = container["State"].get("Running")
        watch = await self._watch(spec, container, log) if running else None
        final = await self._inspect_id(container["Id"])
        return await self._outcome(spec, final, watch, reconnected)

    async def _create(self, spec: RunSpec, name: str, arguments: str) -> None:
        tool = spec.tool
        command = tool.query if spec.mode is DispatchMode.QUERY else tool.command
        if spec.mode is DispatchMode.QUERY and command is None:
            raise InvalidInput(f"tool {tool.ref} has no query command")
        image = tool.image_id or tool.image
        try:
            await self._call(
                self._api.create_container,
                image,
                command=list(command) if command is not None else None,
                name=name,
                user=SANDBOX_USER,
                environment=self._environment(spec, arguments),
                labels=self._labels(spec),
                host_config=self._host_config(spec, await self._volumes(image)),
                stop_signal="SIGTERM",
                stop_timeout=max(1, round(self.config.kill_grace.total_seconds())),
                use_config_proxy=False,
            )
        except NotFound as error:
            raise NotFound(
                f"image {tool.image} ({image}) of tool {tool.ref} is not on the docker engine "
                f"at {self.config.docker_url}: build or load it, then register the tool again",
                image=tool.image,
            ) from error

    def _environment(self, spec: RunSpec, arguments: str) -> dict[str, str]:
        environment = {
            "BH_OPERATION_ID": spec.operation_id,
            "BH_ARGUMENTS": arguments,
            "BH_MODE": spec.mode.value,
            **spec.tool.config,
        }
        if spec.tool.network.allow:
            egress = self.config.egress
            if egress is None:
                raise InvalidInput(
                    f"tool {spec.tool.ref} asks for egress to {list(spec.tool.network.allow)} "
                    "but this Hands has no egress proxy configured"
                )
            environment |= egress.environment(spec.operation_id)
        return environment

    def _labels(self, spec: RunSpec) -> dict[str, str]:
        deadline = spec.overdue_at()
        return {
            LABEL_OPERATION: spec.operation_id,
            LABEL_SESSION: spec.session_id,
            LABEL_MODE: spec.mode.value,
            LABEL_OWNER: self.config.owner,
            LABEL_TOOL: spec.tool.ref,
            LABEL_DEADLINE: deadline.isoformat(),
            LABEL_EXECUTOR: spec.executor,
        }

    async def _volumes(self, image: str) -> list[str]:
        """The paths an image declares as ``VOLUME`` (each would be a writable anonymous
        volume, past the scratch cap and left on the engine after the run)."""
        if image in self._declared:
            return self._declared[image]
        try:
            found = await self._call(self._api.inspect_image, image)
        except NotFound:
            return []  # create reports the missing image
        volumes = sorted((found.get("Config") or {}).get("Volumes") or {})
        if image.startswith("sha256:"):
            self._declared[image] = volumes
        return volumes

    def _host_config(self, spec: RunSpec, volumes: list[str]) -> Any:
        limits, egress = spec.tool.limits, spec.tool.network.allow and self.config.egress
        log_bytes = 2 * limits.output_bytes + 2**20  # framing, and stderr beside stdout
        shm = shared_memory_bytes(limits.scratch_bytes)
        scratch = f"size={limits.scratch_bytes - shm},mode=1777,noexec,nosuid,nodev"
        return self._api.create_host_config(
            network_mode=egress.network if egress else "none",
            dns=[_DNS_NOWHERE] if egress else None,
            read_only=True,
            # a mount at a volume's path replaces the volume: none is created
            tmpfs={**{path: _MASK for path in volumes}, "/tmp": scratch},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            privileged=False,
            pids_limit=limits.pids,
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            nano_cpus=int(min(limits.cpus, self._cpus or limits.cpus) * 1e9),
            oom_score_adj=1000,
            ipc_mode="private",
            shm_size=shm,
            cgroupns="private",
            init=True,
            ulimits=[
                docker.types.Ulimit(name="core", soft=0, hard=0),
                docker.types.Ulimit(name="nofile", soft=1024, hard=1024),
            ],
            log_config=docker.types.LogConfig(
                # "local" keeps the bytes a tool wrote; json-file re-encodes them as JSON
                # strings, replacing bytes that are not UTF-8 (which must be refused)
                type="local",
                config={"max-size": str(log_bytes), "max-file": "2", "compress": "false"},
            ),
            restart_policy={"Name": "no"},
            runtime=self.config.runtime,
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

    # -- waiting ---------------------------------------------------------------------------

    async def _watch(
        self, spec: RunSpec, container: dict[str, Any], log: Capture | None = None
    ) -> _Watch:
        """Follow a running container to its end, enforcing the output cap and the
        wall-clock timeout counted from its own start; its stderr goes to ``log``."""
        watch = _Watch(Capture(spec.tool.limits.output_bytes, 0, spool=False))
        follower = _Follower(self._api, container["Id"], watch.capture)
        # the log preview follows on a client of its own: closing its stream can never
        # touch a connection the run's own calls share
        own = None if log is None else self._client(pool=1)
        logs = (
            None if own is None or log is None else _Follower(own, container["Id"], log, err=True)
        )
        started = _started(container) or datetime.now(UTC)
        deadline = started + timedelta(seconds=spec.tool.timeout_s)
        try:
            await asyncio.wait_for(asyncio.shield(follower.done), _left(deadline))
        except TimeoutError:
            watch.timed_out = True
        except Exception as error:  # the follow broke: the exit is still waited for
            watch.notes.append(f"log follow failed: {error!r}")
        finally:
            if not follower.done.done():
                follower.cancel(by_caller=True)
            if logs is not None:
                logs.cancel(by_caller=True)
            if own is not None:
                with contextlib.suppress(Exception):
                    own.close()
        watch.over_limit = watch.capture.over
        if watch.over_limit:
            with contextlib.suppress(ConflictError, NotFound):
                await self._call(self._api.kill, container["Id"])
        elif not watch.timed_out:
            watch.timed_out = not await self._exited(container["Id"], deadline)
        if watch.timed_out and not watch.over_limit:
            with contextlib.suppress(NotFound):
                await self._call(self._api.stop, container["Id"], timeout=self._grace())
        if not await self._exited(container["Id"], datetime.now(UTC) + self.config.api_timeout):
            raise StoreUnavailable(f"container {container['Id'][:12]} does not stop")
        return watch

    async def _exited(self, container_id: str, deadline: datetime) -> bool:
        """Whether the container stops before ``deadline`` (polled, backing off)."""
        delay = 0.05
        while (await self._inspect_id(container_id))["State"].get("Running"):
            if _left(deadline) <= 0:
                return False
            await asyncio.sleep(min(delay, _left(deadline)))
            delay = min(delay * 2, 1.0)
        return True

    def _grace(self) -> int:
        return max(0, round(self.config.kill_grace.total_seconds()))

    # -- collecting ------------------------------------------------------------------------

    async def _outcome(
        self, spec: RunSpec, container: dict[str, Any], watch: _Watch | None, reconnected: bool
    ) -> RunOutcome:
        state, limits = container["State"], spec.tool.limits
        tail = self.config.log_tail_bytes
        started, finished = _started(container), _time(state.get("FinishedAt"))
        exit_code = int(state.get("ExitCode", -1))
        # Judged on what the engine's log holds once the container has stopped (the
        # engine flushes it before it reports the exit): a live follow can end before
        # the last bytes arrive, and the outcome must not depend on when it did.
        stdout = await self._read_log(container["Id"], Capture(limits.output_bytes, tail))
        try:
            if watch is None:  # collected: what the log kept tells how it went
                watch = _Watch(stdout)
                ran = (finished - started).total_seconds() if started and finished else 0.0
                watch.timed_out = exit_code in _SIGNALLED and ran >= spec.tool.timeout_s
            watch.over_limit = watch.over_limit or stdout.over
            output: JsonValue = None
            problem: str | None = "over the limit"
            if not watch.over_limit:
                output, problem = await asyncio.to_thread(judge, stdout)
            stdout_tail = stdout.tail_text()
        finally:
            stdout.close()
        stderr = await self._read_log(container["Id"], Capture(0, tail, spool=False), err=True)
        oom = bool(state.get("OOMKilled"))
        termination = _termination(
            over_limit=watch.over_limit,
            timed_out=watch.timed_out,
            oom=oom,
            invalid=exit_code == 0 and problem is not None,
            interrupted=exit_code in _SIGNALLED,
        )
        details = {
            Termination.OUTPUT_LIMIT: f"wrote more than {limits.output_bytes} bytes to stdout",
            Termination.TIMEOUT: f"ran past its {spec.tool.timeout_s:g}s timeout: stopped",
            Termination.OOM_KILLED: f"exceeded its memory limit of {limits.memory_bytes} bytes",
            Termination.INVALID_OUTPUT: f"exit 0 but stdout is not one JSON document ({problem})",
            Termination.EXITED: f"exit code {exit_code}",
            Termination.INTERRUPTED: (
                f"killed by signal {exit_code - 128}, which the executor did not send (the "
                "engine stopping, or an operator's docker stop/kill)"
            ),
        }
        detail = "; ".join([details[termination], *watch.notes, state.get("Error") or ""])
        return RunOutcome(
            termination=termination,
            exit_code=exit_code,
            output=output,
            log_tail=stderr.tail_text(),
            stdout_tail=stdout_tail,
            truncated=watch.over_limit,
            container=container["Name"].lstrip("/"),
            reconnected=reconnected,
            started_at=started,
            finished_at=finished,
            detail=detail.strip("; "),
        )

    async def _read_log(self, container_id: str, capture: Capture, *, err: bool = False) -> Capture:
        """Stream the stopped container's stdout (``err``: stderr) log into ``capture``
        (stops once past its limit)."""

        def read() -> None:
            chunks = self._api.logs(container_id, stdout=not err, stderr=err, stream=True)
            try:
                for chunk in chunks:
                    if not capture.feed(chunk) and capture.file is not None:
                        break
            finally:
                _close_stream(chunks)

        try:
            await self._call(read)
        except BaseException:
            capture.close()
            raise
        return capture

    # -- the rest of the protocol ----------------------------------------------------------

    async def state(
        self, operation_id: str, mode: DispatchMode = DispatchMode.RUN
    ) -> RunState | None:
        found = await self._inspect(self._name(operation_id, mode))
        return None if found is None else _STATES.get(found["State"]["Status"], RunState.EXITED)

    async def kill(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> bool:
        name = self._name(operation_id, mode)
        found = await self._owned(name)
        if found is not None:
            with contextlib.suppress(NotFound, ConflictError):  # gone, or already going
                await self._call(self._api.remove_container, found["Id"], force=True, v=True)
        deadline = datetime.now(UTC) + self.config.api_timeout
        delay = 0.05
        while await self._inspect(name) is not None:
            if _left(deadline) <= 0:
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        return True

    async def remove(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> None:
        name = self._name(operation_id, mode)
        found = await self._owned(name)
        if found is None:
            return
        if found["State"].get("Running"):
            raise InvalidTransition(f"container {name} is still running: kill it instead")
        with contextlib.suppress(NotFound, ConflictError):
            await self._call(self._api.remove_container, found["Id"], force=True, v=True)

    async def owned(self) -> list[OwnedRun]:
        rows = await self._call(
            self._api.containers, all=True, filters={"label": f"{LABEL_OWNER}={self.config.owner}"}
        )
        runs = []
        for row in rows:
            labels = row.get("Labels") or {}
            try:
                runs.append(
                    OwnedRun(
                        name=row["Names"][0].lstrip("/"),
                        operation_id=labels[LABEL_OPERATION],
                        session_id=labels[LABEL_SESSION],
                        mode=DispatchMode(labels[LABEL_MODE]),
                        state=_STATES.get(row["State"], RunState.EXITED),
                        deadline=_time(labels.get(LABEL_DEADLINE)),
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
        except docker.errors.NotFound as error:
            raise NotFound(str(error.explanation or error)) from error
        except docker.errors.APIError as error:
            status = error.status_code or 500
            message = f"docker engine: {error.explanation or error}"
            if status == 409:
                raise ConflictError(message) from error
            if status >= 500:
                raise StoreUnavailable(message, status=status) from error
            raise InvalidInput(message, status=status) from error
        except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
            raise StoreUnavailable(
                f"docker engine at {self.config.docker_url} unreachable: {error}"
            ) from error


def _arguments(spec: RunSpec) -> str:
    encoded = json.dumps(spec.args, separators=(",", ":"), ensure_ascii=False)
    size = len(encoded.encode())
    if size > MAX_ARGUMENT_BYTES:
        raise PayloadTooLarge(
            f"arguments of operation {spec.operation_id} are {size} bytes; at most "
            f"{MAX_ARGUMENT_BYTES} fit in a sandbox's environment",
            size=size,
            limit=MAX_ARGUMENT_BYTES,
        )
    return encoded


def shared_memory_bytes(scratch_bytes: int) -> int:
    """The part of a run's scratch cap that is its ``/dev/shm`` (an eighth, at most
    8 MiB); ``/tmp`` gets the rest, so the two writable places together hold at most
    ``scratch_bytes``."""
    return min(scratch_bytes // 8, 8 * 2**20)


def _close_stream(stream: Any) -> None:
    with contextlib.suppress(Exception):
        stream.close()  # shuts the socket down: a blocked read returns
    with contextlib.suppress(Exception):
        # ... and the response still holds the socket's file (docker-py 7.1 keeps it in
        # ``CancellableStream._response``): release it too.
        stream._response.close()


def _termination(
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


def _refused(name: str, what: str, error: BrainhandsError) -> RunOutcome:
    """The engine would not run it (an error from the engine, not about reaching it)."""
    if "status" not in error.details:
        raise error
    name = name.lstrip("/")
    detail = f"container {name}: {what}: {error.message}"
    return RunOutcome(
        termination=Termination.SANDBOX_ERROR, container=name, detail=detail, refused=True
    )


def _gone(name: str, reconnected: bool) -> RunOutcome:
    """Someone removed the container (``kill``: the run was cancelled) before its end
    was read."""
    return RunOutcome(
        termination=Termination.CANCELLED,
        container=name.lstrip("/"),
        reconnected=reconnected,
        detail="the container was removed before its run ended (killed)",
    )


def _absent(name: str) -> RunOutcome:
    return RunOutcome(
        termination=Termination.CANCELLED,
        container=name.lstrip("/"),
        reconnected=True,
        absent=True,
        detail="no container of the operation to collect (collected or removed meanwhile)",
    )


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return None if moment <= _NEVER else moment


def _started(container: dict[str, Any]) -> datetime | None:
    return _time(container["State"].get("StartedAt"))


def _left(deadline: datetime) -> float:
    return max(0.0, (deadline - datetime.now(UTC)).total_seconds())
