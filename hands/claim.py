"""A Hands' claim on an operation's attempt, proved again right before its run starts.

A claim is a create-once revision of the operation's record naming this executor and a
deadline on the store's clock (``session_store.clock``): the tool's timeout plus the
start allowance (pulling, creating, starting the container). Other executors treat the
attempt as possibly in flight until that deadline plus the takeover margin
(``lifecycle.decision``). The executor holding the claim keeps the same bounds on its
own monotonic clock, counted from just before the claim was written — so its bounds
end no later than the ones others judge by, whatever any host's wall clock says.

Between the claim and the run's start the Hands may stall (a paused process, a starved
engine) for longer than the claim lasts; meanwhile another Hands may have taken the
operation over. So the run starts only after ``prove``, called by the sandbox
immediately before the engine's start call (or a warm container's job, or the process's
spawn), and ``check``, the same bound on the monotonic clock in the thread that makes
that call:

=================================================  ========================================
found by ``prove``                                 what happens
=================================================  ========================================
the record moved on and records a cancellation     ``CancelledBeforeStart``: settled as
                                                   cancelled, nothing ran
the record moved on otherwise (another executor    ``StartMissed``: nothing is started; what
claimed it)                                        happens is the new holder's
the claim is still this revision, but its time to  the claim is renewed (a new revision, a
start has passed                                   new deadline) and the run starts under it;
                                                   a lost renewal is ``StartMissed``
=================================================  ========================================

The run is then stopped by ``stop_at`` at the latest: the claim's own end, on this
host's monotonic clock. What remains is a stall between ``check`` and the engine's start
call, a few microseconds of this thread (``docs/operations.md`` gives the figure);
tools that want that closed too pass their attempt's deadline (``BH_ATTEMPT_DEADLINE``)
to the service they call, which refuses a request that arrives after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from contracts import ConflictError, Operation, OperationStatus
from contracts.tool import ToolDefinition
from hands.sandbox import CancelledBeforeStart, StartMissed
from lifecycle.decision import LifecycleSettings
from session_store import SessionStore


class Claim:
    """This executor's claim on one attempt (``record``: the claimed revision)."""

    def __init__(
        self,
        store: SessionStore,
        record: Operation,
        definition: ToolDefinition,
        *,
        settings: LifecycleSettings,
        sent_at: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.record = record
        self._timeout = timedelta(seconds=definition.timeout_s)
        self._settings = settings
        self._monotonic = monotonic
        self._sent_at = sent_at

    @staticmethod
    def deadline_at(now: datetime, timeout: timedelta, settings: LifecycleSettings) -> datetime:
        """The deadline a claim made ``now`` (the store's time) records."""
        return now + timeout + settings.start_allowance

    @property
    def start_by(self) -> float:
        """Until when (this host's monotonic clock) the run may start under the claim: a
        run started later would outlive it."""
        return self._sent_at + self._settings.start_allowance.total_seconds()

    @property
    def stop_at(self) -> float:
        """When (this host's monotonic clock) the claim ends: its run is stopped by then."""
        return self.start_by + self._timeout.total_seconds()

    async def prove(self) -> None:
        """Immediately before the run starts: the record is still this claim's revision
        with time left to run, and names this claim as the one that runs the action
        (``attempt_deadline``); otherwise the claim is renewed first."""
        current = await self.store.get_operation(self.record.operation_id)
        if current is None or current.rev != self.record.rev:
            if current is not None and current.cancel:
                raise CancelledBeforeStart(current)
            holder = "nobody" if current is None else current.executor
            raise StartMissed(
                f"operation {self.record.operation_id}: the claim of rev {self.record.rev} was "
                f"superseded (rev {current.rev if current else '-'}, held by {holder}) before "
                "its run started; nothing was started",
                operation_id=self.record.operation_id,
            )
        late = self._monotonic() >= self.start_by
        if late or current.attempt_deadline != current.deadline:
            await self._renew(current)

    def check(self) -> None:
        """In the thread that starts the run, right before the engine call: the claim's
        time to start has not passed meanwhile (no I/O: the last proof)."""
        if self._monotonic() >= self.start_by:
            raise StartMissed(
                f"operation {self.record.operation_id}: this executor stalled past its "
                "claim's time to start; nothing was started",
                operation_id=self.record.operation_id,
            )

    async def _renew(self, current: Operation) -> None:
        """A new revision of the claim with a new deadline, which is also the deadline of
        the attempt that runs the action: nothing has started under the old one, so
        nothing of it can still be in flight."""
        sent_at = self._monotonic()
        deadline = self.deadline_at(self.store.clock.now(), self._timeout, self._settings)
        try:
            renewed = await self.store.transition_operation(
                current, OperationStatus.RUNNING, deadline=deadline, attempt_deadline=deadline
            )
        except ConflictError as error:
            raise StartMissed(
                f"operation {current.operation_id}: its claim was taken while this executor "
                "renewed it; nothing was started",
                operation_id=current.operation_id,
            ) from error
        self.record, self._sent_at = renewed, sent_at
