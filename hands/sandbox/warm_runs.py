"""The warm path of the Docker sandbox: runs in containers started ahead of them.

``WarmRuns`` is ``DockerSandbox``'s collaborator for everything warm: it takes a warm
container from the pool (``hands.sandbox.pool``) for a run, binds it by renaming it to
the run's container name, delivers the job and reads the run to its trailers
(``hands.sandbox.attachment``); what the streams do not tell, the engine does, as for a
cold run. It makes, refills, sweeps and removes the pool's containers off any run's
path, and rejoins a warm run whose executor died (its stderr's bound mark,
``hands.sandbox.bootstrap``, tells whether the job arrived).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from contracts import BrainhandsError, ConflictError, InvalidInput, NotFound, StoreUnavailable
from contracts.tool import DispatchMode, Termination, ToolDefinition
from hands.sandbox import (
    LABEL_OWNER,
    LABEL_POOL,
    RunOutcome,
    RunSpec,
    StartGuard,
    StartMissed,
    hardening,
)
from hands.sandbox.attachment import Attachment
from hands.sandbox.bootstrap import command_of
from hands.sandbox.engine_outcome import left
from hands.sandbox.engine_streams import Waiter
from hands.sandbox.output import Capture, judge
from hands.sandbox.pool import WarmContainer, WarmPool, pool_key
from hands.sandbox.trailer import Trailer
from hands.sandbox.watcher import Watch

if TYPE_CHECKING:
    from hands.sandbox.docker import DockerSandbox

log = logging.getLogger(__name__)

#: operation ids that name their container as they are (no hash): only those run warm,
#: since a bound warm container's operation is read back from its name
_DOCKER_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: warm runs remembered until their container is removed (then their pool is refilled)
_OWED_MAX = 1024
#: how often exited unbound warm containers are looked for
_SWEEP_S = 60.0
#: how long a warm run's streams may take to end once its container has stopped
_STREAMS_END_S = 1.0


class WarmRuns:
    """A ``DockerSandbox``'s warm runs and the pool they take from (``pool``, which
    the sandbox shares)."""

    def __init__(self, sandbox: DockerSandbox, pool: WarmPool) -> None:
        self._sandbox = sandbox
        self.pool = pool
        #: the pools being filled, by pool key
        self.filling: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._swept = -_SWEEP_S
        self._closing = False
        #: warm runs whose pool is refilled once their container is removed
        self._owed: dict[str, tuple[ToolDefinition, str]] = {}

    async def close(self) -> None:
        """Stop filling the pool — a container being made is finished, not abandoned
        half made — and remove its warm containers (unbound: nothing of an operation is
        lost)."""
        self._closing = True
        await asyncio.gather(*self.filling.values(), return_exceptions=True)
        await asyncio.gather(*self._background, return_exceptions=True)
        for container in self.pool.drain():
            await self._discard(container)

    # -- taking and binding ----------------------------------------------------------------

    async def take(self, spec: RunSpec) -> WarmContainer | None:
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

    def repay(self, operation_id: str) -> None:
        """A warm run's container is gone: its pool gets one again."""
        owed = self._owed.pop(operation_id, None)
        if owed is not None:
            self._refill(*owed)

    async def _warmable(self, spec: RunSpec) -> bool:
        tool = spec.tool
        if spec.mode is not DispatchMode.RUN or tool.command is None:
            return False
        if spec.workspace is not None:  # mounts are fixed at create: a cold start
            return False
        if self.pool.size_for(tool) == 0 or not _DOCKER_SAFE_ID.fullmatch(spec.operation_id):
            return False
        if tool.network.allow and self._sandbox.config.egress is None:
            return False  # refused on the cold path, with the reason
        return await self._sandbox._entrypoint_free(tool.image_id or tool.image)

    async def bind(self, warm: WarmContainer, name: str) -> str:
        """Bind a warm container to the run by giving it the run's name: ``bound``;
        ``taken`` when another container holds the name (the warm one goes back to the
        pool); ``gone`` when the warm one is no more (the run starts cold)."""
        sandbox = self._sandbox
        try:
            await sandbox._call(sandbox._api.rename, warm.id, name)
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

    async def retire(self, warm: WarmContainer) -> None:
        """A bound warm container that had stopped before its job arrived goes, and so
        do the pool's other containers of its tool (likely stopped alike)."""
        await self._discard(warm)
        for other in self.pool.drain(warm.key):
            self._spawn(self._discard(other))

    # -- running ---------------------------------------------------------------------------

    async def run(
        self,
        spec: RunSpec,
        name: str,
        container_id: str,
        arguments: str,
        log: Capture | None,
        *,
        reconnected: bool = False,
        guard: StartGuard | None = None,
    ) -> RunOutcome:
        """Deliver the bound container its job and read the run to its trailers; what
        ended otherwise (killed, timed out, over the cap, exec'd) the engine tells.
        The guard's last check runs in the attaching thread right before the job is
        written: a job not written is a run not started (the container waits for one,
        and a later executor holding the claim may give it)."""
        sandbox = self._sandbox
        nonce = secrets.token_hex(16)
        environment = sandbox._environment(spec, arguments)
        job = json.dumps(
            {"operation": spec.operation_id, "nonce": nonce, "environment": environment}
        )
        limits, tail = spec.tool.limits, sandbox.config.log_tail_bytes
        stdout = Capture(limits.output_bytes, tail)
        stderr = Capture(0, tail, spool=False)
        attachment = Attachment(
            sandbox._client(pool=1),
            container_id,
            job.encode(),
            nonce=nonce,
            stdout=stdout,
            stderr=stderr,
            log=log,
            check=None if guard is None else guard.check,
        )
        stop_at = sandbox.stop_at(spec.tool.timeout_s, guard)
        watch = Watch(stdout)
        # An attach to a container that has stopped waits for it to start again: the
        # engine's wait, beside it, tells when the container is gone from under it.
        stopped = Waiter(sandbox._client(pool=1), container_id)
        try:
            try:
                watching = {attachment.done, stopped.done}
                ended, _ = await asyncio.wait(
                    watching, timeout=left(stop_at), return_when=asyncio.FIRST_COMPLETED
                )
                if not ended:
                    watch.timed_out = True
                elif attachment.done not in ended:  # stopped: its streams end with it
                    await asyncio.wait({attachment.done}, timeout=_STREAMS_END_S)
                if attachment.done.done() and attachment.done.exception() is not None:
                    missed = attachment.done.exception()
                    if isinstance(missed, StartMissed):
                        raise missed  # the job was never written: nothing ran
                    # the attach broke: the engine tells the end
                    watch.notes.append(f"attach failed: {missed!r}")
            finally:
                attachment.cancel(by_caller=True)
                stopped.cancel()
            code = attachment.code
            if code is not None and not attachment.over:
                return await self._outcome(
                    name, attachment, stdout, stderr, code, reconnected=reconnected
                )
            watch.over_limit = attachment.over
        except BaseException:
            stdout.close()
            raise
        stdout.close()
        bound_at = attachment.stderr.bound_at
        return await self._ended_by_engine(
            spec, container_id, watch, stop_at, log, bound_at=bound_at, reconnected=reconnected
        )

    async def _outcome(
        self,
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
        watch: Watch,
        stop_at: float,
        log: Capture | None,
        *,
        bound_at: datetime | None,
        reconnected: bool,
    ) -> RunOutcome:
        """A warm run whose end its streams did not tell: stopped when over its cap or
        time, then waited for and collected from the engine like a cold one."""
        sandbox, watcher = self._sandbox, self._sandbox.watcher
        if watch.over_limit or watch.timed_out:
            with contextlib.suppress(ConflictError, NotFound):
                if watch.over_limit:
                    await sandbox._call(sandbox._api.kill, container_id)
                else:
                    await sandbox._call(sandbox._api.stop, container_id, timeout=watcher.grace())
            await watcher.stopped(container_id)
        else:  # the streams ended early, or the attach broke: watched as a cold one is
            ended = await watcher.watch(spec, container_id, stop_at, log)
            ended.notes[:0] = watch.notes
            watch = ended
        return await watcher.outcome(
            spec, container_id, watch, reconnected=reconnected, warm=True, bound_at=bound_at
        )

    async def rejoin(
        self,
        spec: RunSpec,
        container: dict[str, Any],
        log: Capture | None,
        guard: StartGuard | None = None,
    ) -> RunOutcome:
        """Reconnect to a warm container bound to this run by an executor that died.
        Its stderr's bound mark says the job arrived (the timeout counts from then, on
        the engine's clock). A running one without it waits for a job nobody wrote: it
        gets it now, under this executor's claim (proved first)."""
        watcher = self._sandbox.watcher
        container_id = container["Id"]
        if container["State"].get("Running"):
            head = Trailer(lambda _: None, nonce=None, bound=True)
            await watcher.read_log(container_id, Capture(0, 0, spool=False), err=True, into=head)
            if head.bound_at is None:
                # As far as its log tells, it never got its job: it gets it now. A job
                # that did arrive closed its stdin behind it (``StdinOnce``), and what is
                # written to a closed stdin reaches nobody: the tool runs once either way.
                name = container["Name"].lstrip("/")
                arguments = hardening.arguments(spec)
                if guard is not None:
                    await guard.prove()
                return await self.run(
                    spec, name, container_id, arguments, log, reconnected=True, guard=guard
                )
            ran = await self._sandbox.ran_for(head.bound_at)
            stop_at = self._sandbox.stop_at(spec.tool.timeout_s - ran, guard)
            watch = await watcher.watch(spec, container_id, stop_at, log)
            return await watcher.outcome(spec, container_id, watch, reconnected=True, warm=True)
        return await watcher.outcome(spec, container_id, None, reconnected=True, warm=True)

    # -- the pool's containers -------------------------------------------------------------

    def _refill(self, tool: ToolDefinition, key: str) -> None:
        if self._closing:
            return
        if key not in self.filling and self.pool.wants(key, tool):
            self.filling[key] = asyncio.create_task(self._fill(tool, key))

    async def _fill(self, tool: ToolDefinition, key: str) -> None:
        """Make warm containers of ``tool`` until its pool is full (off any run's path);
        one the engine refuses stops the filling until the next run."""
        try:
            await self._sweep()
            while not self._closing and self.pool.wants(key, tool):
                self.pool.making(key, 1)
                try:
                    self.pool.add(await self._make(tool, key))
                finally:
                    self.pool.making(key, -1)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("cannot make a warm container of %s: %s", tool.ref, error)
        finally:
            self.filling.pop(key, None)

    async def _sweep(self) -> None:
        """Remove warm containers of this deployment that exited unbound (their idle
        limit passed, or their Hands died); at most once a minute."""
        if time.monotonic() - self._swept < _SWEEP_S:
            return
        self._swept = time.monotonic()
        sandbox, owner = self._sandbox, self._sandbox.config.owner
        labels = [f"{LABEL_OWNER}={owner}", LABEL_POOL]
        filters = {"label": labels, "status": "exited"}
        rows = await sandbox._call(sandbox._api.containers, all=True, filters=filters)
        unbound = f"/bh-{owner}.warm."
        for row in rows:
            if any(name.startswith(unbound) for name in row.get("Names") or ()):
                with contextlib.suppress(BrainhandsError):
                    await sandbox._call(
                        sandbox._api.remove_container, row["Id"], force=True, v=True
                    )

    async def _make(self, tool: ToolDefinition, key: str) -> WarmContainer:
        assert tool.command is not None
        sandbox, config = self._sandbox, self._sandbox.config
        image = tool.image_id or tool.image
        name = f"bh-{config.owner}.warm.{secrets.token_hex(6)}"
        created = await sandbox._call(
            sandbox._api.create_container,
            image,
            command=command_of(tuple(tool.command)),
            name=name,
            environment=hardening.warm_environment(tool, idle=config.warm_idle),
            labels=hardening.warm_labels(tool, key, owner=config.owner),
            host_config=sandbox._host_config(tool, await sandbox._volumes(image)),
            stdin_open=True,  # and StdinOnce: closed when the binding Hands closes its side
            **hardening.create_options(kill_grace=config.kill_grace),
        )
        container = WarmContainer(
            id=str(created["Id"]), name=name, key=key, memory=tool.limits.memory_bytes
        )
        try:
            await sandbox._call(sandbox._api.start, container.id)
        except BaseException:
            await self._discard(container)
            raise
        return container

    async def _discard(self, container: WarmContainer) -> None:
        """Remove an unbound warm container (it never held an operation)."""
        sandbox = self._sandbox
        with contextlib.suppress(BrainhandsError):
            await sandbox._call(sandbox._api.remove_container, container.id, force=True, v=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
