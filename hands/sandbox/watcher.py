"""Watching a run's container to its end, and collecting what it left.

A live run is waited for with the engine's own wait (``engine_streams.Waiter``) while
its stdout is followed and counted (``engine_streams.Follower``) and this process's
monotonic clock runs: past ``Limits.output_bytes`` the container is killed
(``output_limit``), past its time (the tool's timeout from its start, and never past its
executor's claim) it is stopped — SIGTERM, SIGKILL after the grace (``timeout``). Once
it has stopped, its final state and both logs are read at once, and the ``RunOutcome`` is
judged on them: never on what a live follow happened to see before it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import JsonValue

from contracts import ConflictError, NotFound, StoreUnavailable
from contracts.tool import Termination
from hands.sandbox import RunOutcome, RunSpec
from hands.sandbox.bootstrap import CUT_SHORT
from hands.sandbox.engine_outcome import left, never_bound, stamp, started_at, termination_of
from hands.sandbox.engine_streams import Follower, Waiter, close_stream
from hands.sandbox.engine_streams import logs as log_chunks
from hands.sandbox.output import Capture, judge
from hands.sandbox.trailer import Trailer

if TYPE_CHECKING:
    from hands.sandbox.docker import DockerSandbox

_SIGNALLED = (128 + 9, 128 + 15)
#: all a warm container that never got its job can have written to stderr
_UNBOUND_STDERR = ("", CUT_SHORT + "\n")


@dataclass(slots=True)
class Watch:
    """What watching a live run saw (absent when an exited container is collected)."""

    capture: Capture
    timed_out: bool = False
    over_limit: bool = False
    notes: list[str] = field(default_factory=list)


class Watcher:
    """A ``DockerSandbox``'s runs watched to their end and collected (cold and warm
    alike: a warm run's end its streams did not tell is the engine's to tell)."""

    def __init__(self, sandbox: DockerSandbox) -> None:
        self._sandbox = sandbox

    # -- watching --------------------------------------------------------------------------

    async def watch(
        self, spec: RunSpec, container_id: str, stop_at: float, log: Capture | None = None
    ) -> Watch:
        """Wait for a running container's end with the engine's own wait, enforcing the
        output cap (its stdout is followed and counted meanwhile) and ``stop_at`` (this
        process's monotonic clock); its stderr goes to ``log``. The follow is never
        waited for: the outcome reads the stopped container's log once."""
        sandbox = self._sandbox
        watch = Watch(Capture(spec.tool.limits.output_bytes, 0, spool=False))
        exit_ = Waiter(sandbox._client(pool=1), container_id)
        follower = Follower(sandbox._api, container_id, watch.capture)
        # the log preview follows on a client of its own: closing its stream can never
        # touch a connection the run's own calls share
        own = None if log is None else sandbox._client(pool=1)
        logs = None if own is None or log is None else Follower(own, container_id, log, err=True)
        try:
            watching: set[asyncio.Future[None]] = {exit_.done, follower.done}
            while not exit_.done.done():
                ended, _ = await asyncio.wait(
                    watching, timeout=left(stop_at), return_when=asyncio.FIRST_COMPLETED
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
                    await sandbox._call(sandbox._api.kill, container_id)
            elif watch.timed_out:
                with contextlib.suppress(NotFound):
                    await sandbox._call(sandbox._api.stop, container_id, timeout=self.grace())
            try:
                await asyncio.wait_for(
                    asyncio.shield(exit_.done), sandbox.config.api_timeout.total_seconds()
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

    async def stopped(self, container_id: str, *, within: float | None = None) -> None:
        """Wait (the engine's wait) until the container has stopped (``within``
        seconds, by default the engine call's timeout; ``StoreUnavailable`` after)."""
        sandbox = self._sandbox
        waiter = Waiter(sandbox._client(pool=1), container_id)
        try:
            bound = sandbox.config.api_timeout.total_seconds() if within is None else within
            await asyncio.wait_for(asyncio.shield(waiter.done), bound)
        except TimeoutError:
            raise StoreUnavailable(f"container {container_id[:12]} does not stop") from None
        finally:
            waiter.cancel()

    def grace(self) -> int:
        """The seconds a stop gives a run between SIGTERM and SIGKILL."""
        return max(0, round(self._sandbox.config.kill_grace.total_seconds()))

    # -- collecting ------------------------------------------------------------------------

    async def outcome(
        self,
        spec: RunSpec,
        container_id: str,
        watch: Watch | None,
        *,
        reconnected: bool,
        warm: bool = False,
        bound_at: datetime | None = None,
    ) -> RunOutcome:
        """``warm``: a bound warm container's (its logs carry the bootstrap's marks;
        ``bound_at``: when its bound mark was read live — the log may have rotated
        past it)."""
        sandbox = self._sandbox
        limits, tail = spec.tool.limits, sandbox.config.log_tail_bytes
        # Judged on what the engine's log holds once the container has stopped (the
        # engine flushes it before it reports the exit): a live follow can end before
        # the last bytes arrive, and the outcome must not depend on when it did. The
        # final state and both logs are asked for at once.
        out, err = Capture(limits.output_bytes, tail), Capture(0, tail, spool=False)
        marks = (Trailer(out.feed, nonce=None), Trailer(err.feed, nonce=None, bound=True))
        reading = asyncio.gather(
            sandbox._inspect_id(container_id),
            self.read_log(container_id, out, into=marks[0] if warm else None),
            self.read_log(container_id, err, err=True, into=marks[1] if warm else None),
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
        started, finished = started_at(container), stamp(state.get("FinishedAt"))
        exit_code = int(state.get("ExitCode", -1))
        if warm:
            started = bound_at or marks[1].bound_at
            if started is None and stdout.total == 0 and stderr.tail_text() in _UNBOUND_STDERR:
                # no mark, and nothing a tool wrote (a log rotated past the mark would
                # hold more than a megabyte): the bootstrap never got its job
                stdout.close()
                return never_bound(container["Name"])
        try:
            if watch is None:  # collected: what the log kept tells how it went
                watch = Watch(stdout)
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
        termination = termination_of(
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

    async def read_log(
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
        sandbox = self._sandbox

        def read() -> None:
            chunks = log_chunks(sandbox._api, container_id, err=err)
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
                close_stream(chunks)

        try:
            await sandbox._call(read)
        except BaseException:
            capture.close()
            raise
        return capture
