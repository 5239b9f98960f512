"""The next step for an operation: one pure decision, for the Brain and for the Hands.

Both executors of operations — the Brain for in-process tools (``brain/operations.py``)
and the Hands for sandboxed ones (``hands/executor.py``) — gather the same evidence and
ask ``decide`` what to do; then they act, each with its own means (a call in this
process, a container). One vocabulary, one set of settings (``LifecycleSettings``), one
table, tested row by row against both executors (``tests/unit/test_lifecycle_table.py``).

======================================================  =================================
evidence                                                step
======================================================  =================================
a result is stored                                      ``reuse`` it; nothing runs
no record                                               ``start`` attempt 1
recorded, not started (``accepted``)                    ``start`` (``cancelled`` if a
                                                        cancellation is recorded)
``cancelled`` (it never ran)                            ``cancelled``: its result
``uncertain``                                           ``parked``: an operator decides
``running``, its run still there (a container)          ``reconnect``: collect it, never
                                                        start it again
``running``, the attempt may still be in flight         ``wait`` until its deadline plus
(another executor, before deadline + takeover margin,   the takeover margin
its process not known to be gone)
``running``, the attempt is over, outcome unknown:
  - a cancellation is recorded                          ``park``: never re-run
  - its query just answered "not found" (``not_found``):
      before the attempt's deadline + takeover margin   ``wait``: its request may still
                                                        land
      ``max_attempts`` starts made                      ``fail``: it did not happen, and
                                                        no start is left
      otherwise                                         ``start`` again
  - ``max_attempts`` starts made: with a query          ``verify`` (found: its result)
                                  without               ``park``
  - replay-safe                                         ``replay`` (same id)
  - unsafe with a query entry point                     ``verify`` (found: its result;
                                                        not found: decided again, above)
  - unsafe without                                      ``park``: an operator decides
======================================================  =================================

Times are the store's (``session_store.clock``): a deadline one executor wrote is judged
by another on the clock they share, never on a host's (invariant 17). The takeover
margin covers that clock's resolution and a round trip, and the time a request already
sent may take to land.

Invariants 8 (unknown outcomes are recovered by the tool's declaration) and 11 (an
unsafe action is never repeated without proof it did not happen) live here, once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from contracts import Operation, OperationStatus, ReplayPolicy
from contracts.model import Frozen


class Step(StrEnum):
    REUSE = "reuse"
    START = "start"
    WAIT = "wait"
    RECONNECT = "reconnect"
    REPLAY = "replay"
    VERIFY = "verify"
    PARK = "park"
    PARKED = "parked"
    CANCELLED = "cancelled"
    FAIL = "fail"


class LifecycleSettings(Frozen):
    """The one set of settings of the operation lifecycle."""

    #: after an attempt's deadline, how long it may still be finishing: a request sent
    #: just before the deadline landing at its destination, and the store clock's
    #: resolution (a whole second on S3 and DynamoDB) plus a round trip
    takeover_margin: timedelta = timedelta(seconds=2)
    #: a Hands' claim lasts the tool's timeout plus this (pulling, creating, starting)
    start_allowance: timedelta = timedelta(seconds=10)
    #: starts of one operation before an unknown outcome is left to an operator
    max_attempts: int = 3


class Declares(Protocol):
    """A tool as either executor knows it (``brain.tools.ToolSpec``, ``ToolDefinition``)."""

    @property
    def replay(self) -> ReplayPolicy: ...

    @property
    def queryable(self) -> bool: ...


class Policy(Frozen):
    """What the tool declares about an unknown outcome."""

    replay: ReplayPolicy
    queryable: bool = False

    @classmethod
    def of(cls, tool: Declares) -> Policy:
        return cls(replay=tool.replay, queryable=tool.queryable)


class Evidence(Frozen):
    """What the executor found, just before deciding."""

    record: Operation | None
    has_result: bool = False
    #: the attempt's run is still there to collect (a container of the operation)
    run_exists: bool = False
    #: the attempt's executor is certainly done with it (its process is gone, or it was
    #: this executor's own attempt and it ended)
    attempt_over: bool = False
    #: the tool's query entry point just answered that it knows nothing of the operation
    not_found: bool = False
    #: the store's time (``session_store.clock``), on which the record's deadlines are
    now: datetime


class Decision(Frozen):
    step: Step
    why: str
    #: for ``wait``: until when
    until: datetime | None = None


def decide(evidence: Evidence, policy: Policy, settings: LifecycleSettings) -> Decision:
    """The next step (see the module's table)."""
    record = evidence.record
    if evidence.has_result:
        return Decision(step=Step.REUSE, why="its result is stored")
    if record is None:
        return Decision(step=Step.START, why="no attempt was made")
    status = record.status
    if status is OperationStatus.CANCELLED:
        return Decision(step=Step.CANCELLED, why=record.reason or "cancelled before it ran")
    if status is OperationStatus.UNCERTAIN:
        return Decision(step=Step.PARKED, why=record.reason or "outcome unknown")
    if status is OperationStatus.ACCEPTED:
        if record.cancel:
            return Decision(step=Step.CANCELLED, why=record.cancel)
        return Decision(step=Step.START, why="recorded, not started")
    if status is not OperationStatus.RUNNING:
        return Decision(step=Step.PARK, why=f"{status.value} but no result is on record")
    if evidence.run_exists:
        return Decision(step=Step.RECONNECT, why="its run is still there")
    if not evidence.attempt_over and record.deadline is not None:
        until = record.deadline + settings.takeover_margin
        if evidence.now < until:
            return Decision(
                step=Step.WAIT,
                why=(
                    f"attempt {record.attempts} by {record.executor} may still be in flight "
                    f"until {until.isoformat()}"
                ),
                until=until,
            )
    if record.attempts == 0:
        # claimed, never started (e.g. a claim for a query): nothing can have happened
        if record.cancel:
            return Decision(step=Step.CANCELLED, why=record.cancel)
        return Decision(step=Step.START, why="claimed, never started")
    why = f"attempt {record.attempts} by {record.executor} may have run; its outcome is unknown"
    if record.cancel:
        return Decision(
            step=Step.PARK, why=f"{why}; cancelled meanwhile ({record.cancel}): never re-run"
        )
    if evidence.not_found:
        return _not_found(record, evidence.now, settings)
    exhausted = record.attempts >= settings.max_attempts
    if exhausted and policy.queryable:
        return Decision(
            step=Step.VERIFY,
            why=f"{why}; {record.attempts} attempts made: asking its query entry point first",
        )
    if exhausted:
        return Decision(
            step=Step.PARK,
            why=f"{why}; {record.attempts} attempts made, giving the decision to an operator",
        )
    if policy.replay is ReplayPolicy.SAFE:
        return Decision(step=Step.REPLAY, why=f"{why}; replay-safe: run again with the same id")
    if policy.queryable:
        return Decision(step=Step.VERIFY, why=f"{why}; asking its query entry point")
    return Decision(
        step=Step.PARK,
        why=(
            f"{why}; {record.tool} is not replay-safe and has no query, so it is not re-run: "
            "an operator must decide"
        ),
    )


def _not_found(record: Operation, now: datetime, settings: LifecycleSettings) -> Decision:
    """The query knows nothing of the operation. That proves it did not happen only once
    the deadline of the attempt that ran the action (and the takeover margin) has
    passed: until then its request may still be in flight (held somewhere, or sent just
    before its connection broke) and land later."""
    attempted = record.attempt_deadline or record.deadline
    if attempted is not None and now < attempted + settings.takeover_margin:
        until = attempted + settings.takeover_margin
        return Decision(
            step=Step.WAIT,
            why=(
                f"its query found nothing, but attempt {record.attempts} may still land "
                f"until {until.isoformat()}"
            ),
            until=until,
        )
    if record.attempts >= settings.max_attempts:
        return Decision(
            step=Step.FAIL,
            why=(
                f"its query found nothing after attempt {record.attempts}'s deadline: it did "
                f"not happen, and its {record.attempts} attempts are spent"
            ),
        )
    return Decision(
        step=Step.START,
        why=f"its query found nothing after attempt {record.attempts}'s deadline: start again",
    )
