"""The invariants a chaos run is judged by, read from the store and the ledgers at the end.

Violations: a lost submission or a stuck session; an operation executed twice; an email
POSTed again after it was accepted; a result applied twice, or executed and never
applied (unless a cancel storm cancelled its task and its result records the effect); a
task failed for a reason the design does not call for; a stale-fence commit accepted;
a forged message that ran anything or was not refused and counted; a cancelled
operation whose effect happened; a limit overrun by concurrent callers; and liveness:
fewer than ``min_succeeded`` of the eligible sessions answered, or of their operations
succeeded (a run where everything errors is no pass).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from bh.chaos_cancel import CancelStorms, request_of
from bh.chaos_forge import Forger
from bh.chaos_limits import LimitBursts
from bh.chaos_report import ChaosReport
from examples.emails.wire import Ledger
from session_store import SessionStore

#: Failures the design calls for: the workload's failing tool, and the restart limit
#: (a phase whose executor was killed ``max_crashes`` times fails its task: under
#: dozens of Brain kills, a phase is sometimes in every one of them).
_DESIGNED = ("asked to fail", "crashed its executor")
#: a limit burst's sessions fail by design once their budget is reached
_BUDGET = "budget_exceeded"


async def check(
    store: SessionStore,
    sessions: int,
    counted: Mapping[str, int],
    emails: Ledger,
    report: ChaosReport,
    *,
    forger: Forger,
    storms: CancelStorms,
    bursts: LimitBursts | None = None,
    min_succeeded: float = 0.0,
) -> None:
    for session_id in [f"s{n}" for n in range(sessions)] + storms.own:
        await _check_session(store, session_id, request_of(session_id), report)
    if bursts is not None:
        for session_id in bursts.own:  # what they applied counts like any session's
            await _check_log(store, session_id, report)
        report.violations += await bursts.check(store)
        report.violations += await _burst_sessions(store, bursts)
    report.executions.update(counted)  # the count tool's executions, each operation's
    # the email service keeps each operation's message once; a second POST of an
    # operation it had already accepted is a send repeated without verifying first
    report.executions.update(message.operation_id for message in emails.messages)
    report.violations += [
        f"email sent again after it was accepted: {op} ({count} requests)"
        for op, count in emails.requests.items()
        if count > 1
    ]
    twice = [op for op, count in report.executions.items() if count > 1]
    applied_twice = [op for op, count in report.applications.items() if count > 1]
    report.violations += [f"lost submission {s}" for s in report.lost]
    report.violations += [f"stuck session {s}" for s in report.stuck]
    report.violations += [f"operation executed twice: {op}" for op in twice]
    report.violations += [f"result applied twice: {op}" for op in applied_twice]
    report.violations += [f"stale-fence commit accepted: {c}" for c in report.stale_commits]
    unexpected = [
        s
        for s, why in report.failed.items()
        if not _as_designed(why, cancelled=s in storms.stormed)
    ]
    report.violations += [f"failed for another reason: {s}: {report.failed[s]}" for s in unexpected]
    executed = set(report.executions)
    cancel_found, recorded = await storms.check(executed)
    report.violations += cancel_found
    never = sorted(executed - set(report.applications) - recorded)
    report.violations += [f"executed, result never applied: {op}" for op in never]
    report.violations += await forger.check(store, executed, set(report.applications))
    report.forged = forger.summary()
    report.stormed = dict(storms.stormed)
    report.storm_sessions = len(storms.own)
    await _liveness(store, sessions, report, storms, min_succeeded)


async def _liveness(
    store: SessionStore,
    sessions: int,
    report: ChaosReport,
    storms: CancelStorms,
    floor: float,
) -> None:
    """The share of the run's sessions that answered, and of their operations that
    succeeded, among those neither designed to fail nor hit by a cancel storm."""
    eligible = [
        f"s{n}"
        for n in range(sessions)
        if f"s{n}" not in report.meant_to_fail and f"s{n}" not in storms.stormed
    ]
    report.eligible = len(eligible)
    unanswered = set(report.failed) | set(report.stuck) | set(report.lost)
    report.answered = sum(s not in unanswered for s in eligible)
    for session_id in eligible:
        for operation in await store.list_operations(session_id):
            report.operations += 1
            report.operations_succeeded += operation.status.value == "succeeded"
    if report.eligible and report.answered < floor * report.eligible:
        report.violations.append(
            f"liveness: {report.answered} of {report.eligible} eligible sessions answered "
            f"(under {floor:.0%})"
        )
    if report.operations and report.operations_succeeded < floor * report.operations:
        report.violations.append(
            f"liveness: {report.operations_succeeded} of {report.operations} operations of "
            f"eligible sessions succeeded (under {floor:.0%})"
        )


async def _burst_sessions(store: SessionStore, bursts: LimitBursts) -> list[str]:
    """A budget burst's messages end answered or failed on the budget; none stuck."""
    found = []
    for session_id in bursts.own:
        handle = await store.session(session_id)
        for request_id in bursts.requests(session_id):
            submission = await handle.submission(request_id)
            if submission is None:
                found.append(f"lost submission {session_id}/{request_id}")
            elif not submission.status.is_final:
                found.append(f"stuck session {session_id}/{request_id}")
            elif submission.error is not None and submission.error.code != _BUDGET:
                found.append(
                    f"failed for another reason: {session_id}/{request_id}: "
                    f"{submission.error.message[:200]}"
                )
    return found


async def _check_session(
    store: SessionStore, session_id: str, request_id: str, report: ChaosReport
) -> None:
    handle = await store.session(session_id)
    submission = await handle.submission(request_id)
    if submission is None:
        report.lost.append(session_id)
        return
    if not submission.status.is_final:
        report.stuck.append(session_id)
    elif submission.status.value == "answered":
        report.completed += 1
    else:
        error = submission.error
        status = submission.status.value
        report.failed[session_id] = status if status == "cancelled" or not error else error.message
    await _check_log(store, session_id, report)
    report.violations += await _unexpected_failures(store, session_id, report)


def _as_designed(why: str, *, cancelled: bool = False) -> bool:
    if cancelled and ("cancel" in why):
        return True
    return any(reason in why for reason in _DESIGNED)


async def _unexpected_failures(
    store: SessionStore, session_id: str, report: ChaosReport
) -> list[str]:
    """Tasks (subtasks included) that failed for a reason the design does not call for."""
    found = []
    async for record in store.history(session_id):
        for task in record.commit.tasks:
            error = task.error.message if task.error else ""
            if task.outcome is None or task.outcome.value != "failed":
                continue
            if task.error is not None and task.error.code == "restart_limit":
                report.restart_limited.append(f"{session_id}/{task.id}")
            elif not _as_designed(error) and "subtask" not in error:
                found.append(f"task {session_id}/{task.id} failed: {error[:200]}")
    return found


def fenced_in_logs(work: Path) -> int:
    """Drives a Brain dropped because a newer holder took the session (store refusal or
    lost lease), as the Brains logged them."""
    marks = ("fenced out", "lease lost")
    return sum(
        line.count(mark)
        for log in work.glob("brain-*.log")
        for line in log.read_text(errors="replace").splitlines()
        for mark in marks
    )


def ledger_counts(path: Path) -> Counter[str]:
    """Executions of the process ``count`` tool per operation, from its ledger file."""
    return Counter(path.read_text().split() if path.exists() else [])


async def _check_log(store: SessionStore, session_id: str, report: ChaosReport) -> None:
    highest = 0
    async for record in store.history(session_id):
        report.applications.update(record.commit.applied_operations)
        if record.claim:
            highest = max(highest, record.fence)
        elif record.writer_fence is not None and record.writer_fence < highest:
            report.stale_commits.append(f"{session_id}@{record.seq}")
