"""What a chaos run found, and how it is shown."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from bh import terminal

console = terminal.console()


@dataclass
class ChaosReport:
    seed: int
    schedule: list[tuple[float, str, str]] = field(default_factory=list)
    submitted: int = 0
    #: sessions the cancel storms submitted themselves (``c0``...), beyond ``submitted``
    storm_sessions: int = 0
    completed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    #: sessions a cancel storm hit, and what each was doing then
    stormed: dict[str, str] = field(default_factory=dict)
    #: tasks failed by the restart limit: a phase whose executor was killed that often
    restart_limited: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    executions: Counter[str] = field(default_factory=Counter)
    applications: Counter[str] = field(default_factory=Counter)
    fenced_refusals: int = 0
    stale_commits: list[str] = field(default_factory=list)
    #: forged messages sent, refused by a server (no credentials), refused by the system
    forged: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    #: why the fault plan did not run to its end, if it did not
    incomplete: str = ""
    #: sessions whose workload fails on purpose (the failing tool)
    meant_to_fail: set[str] = field(default_factory=set)
    #: liveness: sessions not designed to fail nor stormed, and how many answered; their
    #: operations, and how many succeeded
    eligible: int = 0
    answered: int = 0
    operations: int = 0
    operations_succeeded: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_kind(self) -> Counter[str]:
        return Counter(kind for _, kind, _ in self.schedule)


def show(report: ChaosReport) -> None:
    console.print(f"[bold]seed {report.seed}[/] — fault schedule (seconds, fault, target):")
    for moment, fault, target in report.schedule:
        console.print(f"  {moment:7.2f}  {fault:21} {target}")
    if report.incomplete:
        console.print(f"[yellow]{report.incomplete}[/]")
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(report.by_kind().items()))
    console.print(f"faults by kind: {kinds}")
    cancelled = sum(report.failed.get(s) == "cancelled" for s in report.stormed)
    console.print(
        f"sessions submitted {report.submitted} (+{report.storm_sessions} by cancel storms), "
        f"completed {report.completed}, "
        f"failed {len(report.failed)} (as designed: a failing tool, the restart limit, "
        f"or a cancel storm: {cancelled} cancelled of {len(report.stormed)} stormed), "
        f"stuck {len(report.stuck)}, lost {len(report.lost)}"
    )
    if report.restart_limited:
        console.print(
            f"tasks failed by the restart limit (their phase's executor killed 3 times): "
            f"{len(report.restart_limited)}: {', '.join(report.restart_limited)}"
        )
    console.print(
        f"operations executed {sum(report.executions.values())} "
        f"({len(report.executions)} distinct), results applied "
        f"{sum(report.applications.values())} ({len(report.applications)} distinct), "
        f"drives dropped by fencing {report.fenced_refusals}, "
        f"stale-fence commits accepted {len(report.stale_commits)}"
    )
    if report.eligible:
        console.print(
            f"succeeded: {report.answered} of {report.eligible} eligible sessions "
            f"({_share(report.answered, report.eligible)}), "
            f"{report.operations_succeeded} of {report.operations} of their operations "
            f"({_share(report.operations_succeeded, report.operations)})"
        )
    if report.forged:
        console.print("forged messages: " + ", ".join(f"{k} {v}" for k, v in report.forged.items()))
    if report.violations:
        for violation in report.violations:
            console.print(f"[red]VIOLATION[/] {violation}")
    else:
        console.print("[green]no violation[/]")


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"
