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
import secrets
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
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
from contracts.tool import MAX_ARGUMENT_BYTES, DispatchMode, Termination, ToolDefinition
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
    container_name,
)
from hands.sandbox.attachment import Attachment
from hands.sandbox.bootstrap import CUT_SHORT, command_of
from hands.sandbox.output import Capture, judge
from hands.sandbox.pool import WarmContainer, WarmPool, pool_key
from hands.sandbox.trailer import Trailer

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
#: operation ids that name their container as they are (no hash): only those run warm,
#: since a bound warm container's operation is read back from its name
_DOCKER_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: all a warm container that never got its job can have written to stderr
_UNBOUND_STDERR = ("", CUT_SHORT + "\n")
#: the CFS period a run's CPU share is a quota of (Docker's own default: 100 ms)
_CPU_PERIOD_US = 1_000_000
#: warm runs remembered until their container is removed (then their pool is refilled)
_OWED_MAX = 1024
#: how often exited unbound warm containers are looked for
_SWEEP_S = 60.0
#: how long a warm run's streams may take to end once its container has stopped
_STREAMS_END_S = 1.0
#: how long removing a container waits for a teardown still under way
_TEARDOWN_S = 5.0
#: one engine ``wait`` call's bound (repeated until the exit): how long a cancelled
#: waiter's thread may linger
_WAIT_CALL_S = 30.0


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
            stream = _logs(self._api, self._id, err=self._err, follow=True)
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


class _Waiter:
    """Waits for a container's exit with the engine's ``wait`` in a thread of its own
    (it blocks for the whole run), each call bounded by ``_WAIT_CALL_S`` and repeated
    until the exit or ``cancel``. ``done`` ends at the exit, or with ``NotFound`` when
    the container was removed, or with the engine's error. The thread owns ``api``
    and closes it."""

    def __init__(self, api: Any, container_id: str) -> None:
        self._api, self._id = api, container_id
        self._cancelled = threading.Event()
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        threading.Thread(target=self._run, name=f"bh-wait-{container_id[:12]}", daemon=True).start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            while not self._cancelled.is_set():
                began = time.monotonic()
                try:
                    self._api.wait(self._id, timeout=_WAIT_CALL_S)
                    break
                except requests.exceptions.RequestException:
                    if time.monotonic() - began < _WAIT_CALL_S:
                        raise  # not the call's own bound: the engine is not answering
        except BaseException as failure:  # reported to the loop, translated there
            error = failure
        finally:
            with contextlib.suppress(Exception):
                self._api.close()
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self._loop.call_soon_threadsafe(self._settle, error)

    def _settle(self, error: BaseException | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(_translated(error, "the engine's wait"))

    def cancel(self) -> None:
        """Stop waiting once the call in flight returns (a container that has already
        exited, as when this is called after ``done``, returns at once)."""
        self._cancelled.set()
        if not self.done.done():
            self.done.cancel()


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
        #: whether an image pinned by id declares an ``ENTRYPOINT`` (then no warm runs)
        self._entrypoint: dict[str, bool] = {}
        config = self.config
        self.pool = WarmPool(
            config.warm,
            limit=config.warm_limit,
            memory_bytes=config.warm_memory_bytes,
            idle_s=config.warm_idle.total_seconds(),
        )
        self._filling: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._swept = -_SWEEP_S
        self._closing = False
        #: warm runs whose pool is refilled once their container is removed
        self._owed: dict[str, tuple[ToolDefinition, str]] = {}

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
        self._closing = True
        await asyncio.gather(*self._filling.values(), return_exceptions=True)
        await asyncio.gather(*self._background, return_exceptions=True)
        for container in self.pool.drain():
            await self._discard(container)
        await asyncio.to_thread(self._api.close)

    # -- run -------------------------------------------------------------------------------

    async def run(self, spec: RunSpec, *, log: Capture | None = None) -> RunOutcome:
        """``log``: the run's stderr is fed to it while the run lasts (previews).

        A fresh run is created first: a name already taken is what sends it to
        reconnect (inspect, check the labels, start/wait/collect what is there). So a
        cold run asks the engine to create, start and wait, then reads the final state
        and the two logs at once — no inspect before or between."""
        arguments = _arguments(spec)
        name = self._name(spec.operation_id, spec.mode)
        if self._cpus is None:
            await self.check()
        taken = False  # the name is another container's: reconnect to it
        if not spec.collect_only:
            warm = await self._take_warm(spec)
            bound = warm is not None and await self._bind(warm, name)
            if warm is not None and bound == "bound":
                work = self._warm(spec, name, warm.id, arguments, log)
                outcome = await self._guarded(name, False, work)
                if not outcome.refused:
                    return outcome
                # It had stopped before its job arrived (an engine restart, its idle
                # limit): the tool never started there. It goes — and the pool's other
                # containers of the tool, likely stopped alike — and the run starts cold.
                await self._discard(warm)
                for other in self.pool.drain(warm.key):
                    self._spawn(self._discard(other))
            taken = bound == "taken"
        if not spec.collect_only and not taken:
            try:
                created = await self._create(spec, name, arguments)
            except ConflictError:
                pass  # the name is taken: this run exists (another executor's, or ours)
            except (InvalidInput, StoreUnavailable) as error:
                return _refused(name, "the engine refused to create it", error)
            else:
                return await self._guarded(name, False, self._fresh(spec, name, created, log))
        found = await self._inspect(name)
        if found is None:
            return _absent(name) if spec.collect_only else _gone(name, True)
        refusal = self._not_ours(found, spec)
        if refusal is not None:
            return refusal
        return await self._guarded(name, True, self._follow(spec, found, log))

    async def _guarded(
        self, name: str, reconnected: bool, work: Coroutine[Any, Any, RunOutcome]
    ) -> RunOutcome:
        """``work``'s outcome; a container removed meanwhile (killed: the run was
        cancelled) is told as gone."""
        try:
            return await work
        except NotFound:
            return _gone(name, reconnected)
        except ConflictError:
            # "dead or marked for removal": killed (cancelled) while we collected it
            if await self._removing(name):
                return _gone(name, reconnected)
            raise

    # -- warm runs -------------------------------------------------------------------------

    async def _take_warm(self, spec: RunSpec) -> WarmContainer | None:
        """A warm container for this run (None: start cold).

        The pool is refilled once the run is over — when its container is removed —
        not while it runs: making a container keeps the engine busy for a few hundred
        milliseconds of CPU, which on a small host slows the very run (and the result's
        way back) that the warm container was to speed up. An empty pool starts filling
        at once (that run is cold anyway)."""
        if not await self._warmable(spec):
            return None
        key = pool_key(spec.tool)
        warm, stale = self.pool.take(key)
        for container in stale:
            self._spawn(self._discard(container))
        if warm is None:
            self._refill(spec.tool, key)
        else:
            self._owed[spec.operation_id] = (spec.tool, key)
            while len(self._owed) > _OWED_MAX:  # runs never removed (their Hands moved on)
                tool, owed = self._owed.pop(next(iter(self._owed)))
                self._refill(tool, owed)
        return warm

    def _repay(self, operation_id: str) -> None:
        """A warm run's container is gone: its pool gets one again."""
        owed = self._owed.pop(operation_id, None)
        if owed is not None:
            self._refill(*owed)

    async def _warmable(self, spec: RunSpec) -> bool:
        tool = spec.tool
        if spec.mode is not DispatchMode.RUN or tool.command is None:
            return False
        if self.pool.size_for(tool) == 0 or not _DOCKER_SAFE_ID.fullmatch(spec.operation_id):
            return False
        if tool.network.allow and self.config.egress is None:
            return False  # refused on the cold path, with the reason
        image = tool.image_id or tool.image
        if image not in self._entrypoint:
            await self._volumes(image)
        return self._entrypoint.get(image) is False

    async def _bind(self, warm: WarmContainer, name: str) -> str:
        """Bind a warm container to the run by giving it the run's name: ``bound``;
        ``taken`` when another container holds the name (the warm one goes back to the
        pool); ``gone`` when the warm one is no more (the run starts cold)."""
        try:
            await self._call(self._api.rename, warm.id, name)
        except ConflictError:
            self.pool.give_back(warm)
            return "taken"
        except NotFound:
            return "gone"
        except (InvalidInput, StoreUnavailable):
            # renamed or not, nobody can tell: a reconnect finds it under either name,
            # and a bound one that never got its job is told as never run
            self._spawn(self._discard(warm))
            raise
        return "bound"

    async def _warm(
        self,
        spec: RunSpec,
        name: str,
        container_id: str,
        arguments: str,
        log: Capture | None,
        *,
        reconnected: bool = False,
    ) -> RunOutcome:
        """Deliver the bound container its job and read the run to its trailers; what
        ended otherwise (killed, timed out, over the cap, exec'd) the engine tells."""
        nonce = secrets.token_hex(16)
        environment = self._environment(spec, arguments)
        job = json.dumps(
            {"operation": spec.operation_id, "nonce": nonce, "environment": environment}
        )
        limits, tail = spec.tool.limits, self.config.log_tail_bytes
        stdout = Capture(limits.output_bytes, tail)
        stderr = Capture(0, tail, spool=False)
        attachment = Attachment(
            self._client(pool=1),
            container_id,
            job.encode(),
            nonce=nonce,
            stdout=stdout,
            stderr=stderr,
            log=log,
        )
        deadline = datetime.now(UTC) + timedelta(seconds=spec.tool.timeout_s)
        watch = _Watch(stdout)
        # An attach to a container that has stopped waits for it to start again: the
        # engine's wait, beside it, tells when the container is gone from under it.
        stopped = _Waiter(self._client(pool=1), container_id)
        try:
            try:
                watching = {attachment.done, stopped.done}
                ended, _ = await asyncio.wait(
                    watching, timeout=_left(deadline), return_when=asyncio.FIRST_COMPLETED
                )
                if not ended:
                    watch.timed_out = True
                elif attachment.done not in ended:  # stopped: its streams end with it
                    await asyncio.wait({attachment.done}, timeout=_STREAMS_END_S)
                if attachment.done.done() and attachment.done.exception() is not None:
                    # the attach broke: the engine tells the end
                    watch.notes.append(f"attach failed: {attachment.done.exception()!r}")
            finally:
                attachment.cancel(by_caller=True)
                stopped.cancel()
            code = attachment.code
            if code is not None and not attachment.over:
                return await self._warm_outcome(
                    spec, name, attachment, stdout, stderr, code, reconnected=reconnected
                )
            watch.over_limit = attachment.over
        except BaseException:
            stdout.close()
            raise
        stdout.close()
        bound_at = attachment.stderr.bound_at
        return await self._ended_by_engine(
            spec, container_id, watch, deadline, log, bound_at=bound_at, reconnected=reconnected
        )

    async def _warm_outcome(
        self,
        spec: RunSpec,
        name: str,
        attachment: Attachment,
        stdout: Capture,
        stderr: Capture,
        code: int,
        *,
        reconnected: bool,
    ) -> RunOutcome:
        """The outcome of a warm run whose trailers arrived: the tool's interpreter
        exited with ``code`` and every byte it wrote was read."""
        try:
            output, problem = await asyncio.to_thread(judge, stdout)
            stdout_tail = stdout.tail_text()
        finally:
            stdout.close()
        invalid = code == 0 and problem is not None
        termination = Termination.INVALID_OUTPUT if invalid else Termination.EXITED
        detail = (
            f"exit 0 but stdout is not one JSON document ({problem})"
            if invalid
            else f"exit code {code}"
        )
        return RunOutcome(
            termination=termination,
            exit_code=code,
            output=output,
            log_tail=stderr.tail_text(),
            stdout_tail=stdout_tail,
            container=name,
            reconnected=reconnected,
            started_at=attachment.stderr.bound_at,
            finished_at=datetime.now(UTC),
            detail=detail,
        )

    async def _ended_by_engine(
        self,
        spec: RunSpec,
        container_id: str,
        watch: _Watch,
        deadline: datetime,
        log: Capture | None,
        *,
        bound_at: datetime | None,
        reconnected: bool,
    ) -> RunOutcome:
        """A warm run whose end its streams did not tell: stopped when over its cap or
        time, then waited for and collected from the engine like a cold one."""
        if watch.over_limit or watch.timed_out:
            with contextlib.suppress(ConflictError, NotFound):
                if watch.over_limit:
                    await self._call(self._api.kill, container_id)
                else:
                    await self._call(self._api.stop, container_id, timeout=self._grace())
            await self._stopped(container_id)
        else:  # the streams ended early, or the attach broke: watched as a cold one is
            ended = await self._watch(spec, container_id, deadline, log)
            ended.notes[:0] = watch.notes
            watch = ended
        return await self._outcome(
            spec, container_id, watch, reconnected=reconnected, warm=True, bound_at=bound_at
        )

    async def _stopped(self, container_id: str, *, within: float | None = None) -> None:
        """Wait (the engine's wait) until the container has stopped (``within``
        seconds, by default the engine call's timeout; ``StoreUnavailable`` after)."""
        waiter = _Waiter(self._client(pool=1), container_id)
        try:
            bound = self.config.api_timeout.total_seconds() if within is None else within
            await asyncio.wait_for(asyncio.shield(waiter.done), bound)
        except TimeoutError:
            raise StoreUnavailable(f"container {container_id[:12]} does not stop") from None
        finally:
            waiter.cancel()

    def _refill(self, tool: ToolDefinition, key: str) -> None:
        if self._closing:
            return
        if key not in self._filling and self.pool.wants(key, tool):
            self._filling[key] = asyncio.create_task(self._fill(tool, key))

    async def _fill(self, tool: ToolDefinition, key: str) -> None:
        """Make warm containers of ``tool`` until its pool is full (off any run's path);
        one the engine refuses stops the filling until the next run."""
        try:
            await self._sweep()
            while not self._closing and self.pool.wants(key, tool):
                self.pool.making(key, 1)
                try:
                    self.pool.add(await self._make_warm(tool, key))
                finally:
                    self.pool.making(key, -1)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("cannot make a warm container of %s: %s", tool.ref, error)
        finally:
            self._filling.pop(key, None)

    async def _sweep(self) -> None:
        """Remove warm containers of this deployment that exited unbound (their idle
        limit passed, or their Hands died); at most once a minute."""
        if time.monotonic() - self._swept < _SWEEP_S:
            return
        self._swept = time.monotonic()
        labels = [f"{LABEL_OWNER}={self.config.owner}", LABEL_POOL]
        filters = {"label": labels, "status": "exited"}
        rows = await self._call(self._api.containers, all=True, filters=filters)
        unbound = f"/bh-{self.config.owner}.warm."
        for row in rows:
            if any(name.startswith(unbound) for name in row.get("Names") or ()):
                with contextlib.suppress(BrainhandsError):
                    await self._call(self._api.remove_container, row["Id"], force=True, v=True)

    async def _make_warm(self, tool: ToolDefinition, key: str) -> WarmContainer:
        assert tool.command is not None
        image = tool.image_id or tool.image
        name = f"bh-{self.config.owner}.warm.{secrets.token_hex(6)}"
        environment = {
            **tool.config,
            "BH_WARM_IDLE_S": str(self.config.warm_idle.total_seconds()),
        }
        labels = {
            LABEL_OWNER: self.config.owner,
            LABEL_TOOL: tool.ref,
            LABEL_MODE: DispatchMode.RUN.value,
            LABEL_POOL: key,
        }
        created = await self._call(
            self._api.create_container,
            image,
            command=command_of(tuple(tool.command)),
            name=name,
            user=SANDBOX_USER,
            environment=environment,
            labels=labels,
            host_config=self._host_config(tool, await self._volumes(image)),
            stdin_open=True,  # and StdinOnce: closed when the binding Hands closes its side
            stop_signal="SIGTERM",
            stop_timeout=max(1, round(self.config.kill_grace.total_seconds())),
            use_config_proxy=False,
        )
        container = WarmContainer(
            id=str(created["Id"]), name=name, key=key, memory=tool.limits.memory_bytes
        )
        try:
            await self._call(self._api.start, container.id)
        except BaseException:
            await self._discard(container)
            raise
        return container

    async def _discard(self, container: WarmContainer) -> None:
        """Remove an unbound warm container (it never held an operation)."""
        with contextlib.suppress(BrainhandsError):
            await self._call(self._api.remove_container, container.id, force=True, v=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- cold runs -------------------------------------------------------------------------

    async def _fresh(
        self, spec: RunSpec, name: str, container_id: str, log: Capture | None
    ) -> RunOutcome:
        """Start the container just created, wait for its end, collect it."""
        try:
            await self._call(self._api.start, container_id)
        except (InvalidInput, StoreUnavailable) as error:
            return _refused(name, "the engine refused to start it", error)
        # the timeout counts from the end of the start call: never before the
        # container's own start (which the engine stamps inside that call)
        deadline = datetime.now(UTC) + timedelta(seconds=spec.tool.timeout_s)
        watch = await self._watch(spec, container_id, deadline, log)
        return await self._outcome(spec, container_id, watch, reconnected=False)

    async def _follow(
        self, spec: RunSpec, container: dict[str, Any], log: Capture | None
    ) -> RunOutcome:
        """Reconnect: start a container that never ran, wait for a running one (its
        timeout counted from its own start), collect an exited one."""
        started = _started(container)
        if LABEL_POOL in (container["Config"].get("Labels") or {}):
            return await self._rejoin_warm(spec, container, log)
        if started is None:
            try:
                await self._call(self._api.start, container["Id"])
            except (InvalidInput, StoreUnavailable) as error:
                return _refused(container["Name"], "the engine refused to start it", error)
            started = datetime.now(UTC)
            running = True
        else:
            running = bool(container["State"].get("Running"))
        watch = None
        if running:
            deadline = started + timedelta(seconds=spec.tool.timeout_s)
            watch = await self._watch(spec, container["Id"], deadline, log)
        return await self._outcome(spec, container["Id"], watch, reconnected=True)

    async def _rejoin_warm(
        self, spec: RunSpec, container: dict[str, Any], log: Capture | None
    ) -> RunOutcome:
        """Reconnect to a warm container bound to this run by an executor that died.
        Its stderr's bound mark says the job arrived (the timeout counts from then). A
        running one without it waits for a job nobody will write: it is stopped, and
        if the mark is still missing once it has, the tool never started."""
        container_id = container["Id"]
        if container["State"].get("Running"):
            head = Trailer(lambda _: None, nonce=None, bound=True)
            await self._read_log(container_id, Capture(0, 0, spool=False), err=True, into=head)
            if head.bound_at is None:
                # As far as its log tells, it never got its job: it gets it now. A job
                # that did arrive closed its stdin behind it (``StdinOnce``), and what is
                # written to a closed stdin reaches nobody: the tool runs once either way.
                name = container["Name"].lstrip("/")
                arguments = _arguments(spec)
                return await self._warm(spec, name, container_id, arguments, log, reconnected=True)
            deadline = head.bound_at + timedelta(seconds=spec.tool.timeout_s)
            watch = await self._watch(spec, container_id, deadline, log)
            return await self._outcome(spec, container_id, watch, reconnected=True, warm=True)
        return await self._outcome(spec, container_id, None, reconnected=True, warm=True)

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
                user=SANDBOX_USER,
                environment=self._environment(spec, arguments),
                labels=self._labels(spec),
                host_config=self._host_config(spec.tool, await self._volumes(image)),
                stop_signal="SIGTERM",
                stop_timeout=max(1, round(self.config.kill_grace.total_seconds())),
                use_config_proxy=False,
            )
            return str(created["Id"])
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
        config = found.get("Config") or {}
        volumes = sorted(config.get("Volumes") or {})
        if image.startswith("sha256:"):
            self._declared[image] = volumes
            self._entrypoint[image] = bool(config.get("Entrypoint"))
        return volumes

    def _host_config(self, tool: ToolDefinition, volumes: list[str]) -> Any:
        limits, egress = tool.limits, tool.network.allow and self.config.egress
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
            # the share as a quota per period: Docker's 100 ms period throttles an
            # interpreter's start (0.25 CPU: 25 ms of every 100); over a 1 s period the
            # same share lets it start in one burst (docs/hardening.md, bench.warm)
            cpu_period=_CPU_PERIOD_US,
            cpu_quota=int(min(limits.cpus, self._cpus or limits.cpus) * _CPU_PERIOD_US),
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

    # -- waiting ---------------------------------------------------------------------------

    async def _watch(
        self, spec: RunSpec, container_id: str, deadline: datetime, log: Capture | None = None
    ) -> _Watch:
        """Wait for a running container's end with the engine's own wait, enforcing the
        output cap (its stdout is followed and counted meanwhile) and the wall-clock
        ``deadline``; its stderr goes to ``log``. The follow is never waited for: the
        outcome reads the stopped container's log once."""
        watch = _Watch(Capture(spec.tool.limits.output_bytes, 0, spool=False))
        exit_ = _Waiter(self._client(pool=1), container_id)
        follower = _Follower(self._api, container_id, watch.capture)
        # the log preview follows on a client of its own: closing its stream can never
        # touch a connection the run's own calls share
        own = None if log is None else self._client(pool=1)
        logs = None if own is None or log is None else _Follower(own, container_id, log, err=True)
        try:
            watching: set[asyncio.Future[None]] = {exit_.done, follower.done}
            while not exit_.done.done():
                ended, _ = await asyncio.wait(
                    watching, timeout=_left(deadline), return_when=asyncio.FIRST_COMPLETED
                )
                if not ended:
                    watch.timed_out = True
                    break
                if follower.done in ended:
                    watching.discard(follower.done)
                    if watch.capture.over:
                        watch.over_limit = True
                        break
                    if follower.done.exception() is not None:
                        watch.notes.append(f"log follow failed: {follower.done.exception()!r}")
            if watch.over_limit:
                with contextlib.suppress(ConflictError, NotFound):
                    await self._call(self._api.kill, container_id)
            elif watch.timed_out:
                with contextlib.suppress(NotFound):
                    await self._call(self._api.stop, container_id, timeout=self._grace())
            try:
                await asyncio.wait_for(
                    asyncio.shield(exit_.done), self.config.api_timeout.total_seconds()
                )
            except TimeoutError:
                raise StoreUnavailable(f"container {container_id[:12]} does not stop") from None
            watch.over_limit = watch.over_limit or watch.capture.over
        finally:
            exit_.cancel()
            follower.cancel(by_caller=True)
            if logs is not None:
                logs.cancel(by_caller=True)
            if own is not None:
                with contextlib.suppress(Exception):
                    own.close()
        return watch

    def _grace(self) -> int:
        return max(0, round(self.config.kill_grace.total_seconds()))

    # -- collecting ------------------------------------------------------------------------

    async def _outcome(
        self,
        spec: RunSpec,
        container_id: str,
        watch: _Watch | None,
        *,
        reconnected: bool,
        warm: bool = False,
        bound_at: datetime | None = None,
    ) -> RunOutcome:
        """``warm``: a bound warm container's (its logs carry the bootstrap's marks;
        ``bound_at``: when its bound mark was read live — the log may have rotated
        past it)."""
        limits, tail = spec.tool.limits, self.config.log_tail_bytes
        # Judged on what the engine's log holds once the container has stopped (the
        # engine flushes it before it reports the exit): a live follow can end before
        # the last bytes arrive, and the outcome must not depend on when it did. The
        # final state and both logs are asked for at once.
        out, err = Capture(limits.output_bytes, tail), Capture(0, tail, spool=False)
        marks = (Trailer(out.feed, nonce=None), Trailer(err.feed, nonce=None, bound=True))
        reading = asyncio.gather(
            self._inspect_id(container_id),
            self._read_log(container_id, out, into=marks[0] if warm else None),
            self._read_log(container_id, err, err=True, into=marks[1] if warm else None),
            return_exceptions=True,
        )
        container, stdout, stderr = await reading
        failure = next(
            (part for part in (container, stdout, stderr) if isinstance(part, BaseException)), None
        )
        if failure is not None:
            for part in (stdout, stderr):
                if isinstance(part, Capture):
                    part.close()
            raise failure
        assert isinstance(container, dict)
        assert isinstance(stdout, Capture) and isinstance(stderr, Capture)
        state = container["State"]
        started, finished = _started(container), _time(state.get("FinishedAt"))
        exit_code = int(state.get("ExitCode", -1))
        if warm:
            started = bound_at or marks[1].bound_at
            if started is None and stdout.total == 0 and stderr.tail_text() in _UNBOUND_STDERR:
                # no mark, and nothing a tool wrote (a log rotated past the mark would
                # hold more than a megabyte): the bootstrap never got its job
                stdout.close()
                return _never_bound(container["Name"])
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

    async def _read_log(
        self,
        container_id: str,
        capture: Capture,
        *,
        err: bool = False,
        into: Trailer | None = None,
    ) -> Capture:
        """Stream the stopped container's stdout (``err``: stderr) log into ``capture``
        (stops once past its limit); ``into``: through that trailer (a warm run's log,
        its marks taken off on the way; a trailer that reads the bound mark only ends
        the read once it has)."""

        def read() -> None:
            chunks = _logs(self._api, container_id, err=err)
            try:
                for chunk in chunks:
                    if into is not None:
                        into.feed(chunk)
                        if into.bound_at is not None and capture.limit == 0 == capture.tail_size:
                            break  # only the mark was wanted
                    else:
                        capture.feed(chunk)
                    if capture.over and capture.file is not None:
                        break
                if into is not None and not into.ended:
                    into.close()
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
        self._repay(operation_id)
        return True

    async def remove(self, operation_id: str, mode: DispatchMode = DispatchMode.RUN) -> None:
        name = self._name(operation_id, mode)
        found = await self._owned(name)
        if found is None:
            self._repay(operation_id)
            return
        if found["State"].get("Running"):
            # a warm run is done once its trailers arrived, while the engine may still
            # be tearing its container down: that is waited for, a little
            try:
                await self._stopped(found["Id"], within=_TEARDOWN_S)
            except StoreUnavailable:
                raise InvalidTransition(
                    f"container {name} is still running: kill it instead"
                ) from None
        with contextlib.suppress(NotFound, ConflictError):
            await self._call(self._api.remove_container, found["Id"], force=True, v=True)
        self._repay(operation_id)

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
        except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
            raise _translated(error, f"docker engine at {self.config.docker_url}") from error


def _translated(error: BaseException, engine: str) -> BaseException:
    """Docker's and requests' errors as this package's (others pass through)."""
    if isinstance(error, docker.errors.NotFound):
        return NotFound(str(error.explanation or error))
    if isinstance(error, docker.errors.APIError):
        status = error.status_code or 500
        message = f"docker engine: {error.explanation or error}"
        if status == 409:
            return ConflictError(message)
        if status >= 500:
            return StoreUnavailable(message, status=status)
        return InvalidInput(message, status=status)
    if isinstance(error, requests.exceptions.RequestException | docker.errors.DockerException):
        return StoreUnavailable(f"{engine} unreachable: {error}")
    return error


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


def _logs(api: Any, container_id: str, *, err: bool, follow: bool = False) -> Any:
    """The container's stdout (``err``: stderr) log as a stream of raw chunks.

    ``APIClient.logs`` first inspects the container to learn whether it has a TTY —
    one more engine round trip per call, and a run reads two logs and follows one. Ours
    never have one, so the log is read as the multiplexed stream it is (docker-py 7.1's
    own helpers, pinned)."""
    params = {"stdout": not err, "stderr": err, "follow": follow, "timestamps": False}
    response = api._get(api._url("/containers/{0}/logs", container_id), params=params, stream=True)
    return docker.types.daemon.CancellableStream(
        api._get_result_tty(True, response, False), response
    )


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


def _never_bound(name: str) -> RunOutcome:
    """A warm container bound to the run whose job never (completely) arrived: the
    tool never started, so the operation certainly did not run there."""
    name = name.lstrip("/")
    detail = (
        f"container {name}: a warm container bound to the run ended before its job "
        "arrived (the executor that bound it died while writing it): the tool never started"
    )
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
