"""``bh chaos``: the whole system under a seeded schedule of faults, then the invariants.

It starts the scheduler, the Session API, Brain workers and Hands (process sandbox) as
separate processes on the dev infrastructure, with the scripted model and the example
email service served in this process (``bh.chaos_services``). It submits sessions
through the Session API — retrying with the same ``request_id`` when the API is down —
of two families: agent sessions, where the scripted model answers after a delay and
calls ``count`` on the Hands, the five-emails batch (subtasks; ``send_email`` runs in
the Brain), ``count`` again, then answers; and task sessions of ``examples.chaos``
(sequential sandboxed calls with durable sleeps, a deliberately failing call, fan-out
subtasks). Meanwhile it injects faults drawn from the seed: SIGKILL a Brain at a random
moment, or while it is inside a model call or an email send (found by the call's client
port), SIGSTOP a Brain past its lease then SIGCONT it, SIGKILL a Hands, restart
nats-server, FLUSHALL Redis, kill and restart the scheduler and the Session API; every
killed process is restarted. Then it reads the store, the ``count`` ledger and the email
service's ledger and reports, per run: sessions submitted / completed / failed (with
reason) / stuck; executions per operation; applications per operation; drives dropped
by fencing vs stale-fence commits accepted. Any violation — a lost submission, a stuck
session, an operation executed or applied twice, an email sent again after it was
accepted, a stale-fence commit accepted — makes the run (and the command) fail. The
seed and the schedule are printed, so a failing run can be replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import redis.asyncio
import typer
from rich.console import Console

from bh.chaos_services import (
    EMAIL_SEND,
    MODEL_CALL,
    ChaosServices,
    InFlight,
    chaos_services,
    owner_of,
)
from bh.fleet import Fleet, until_up
from contracts import CommitRecord, ReplayPolicy
from contracts.tool import ToolDefinition
from examples.emails.wire import Ledger
from runtime.cancellation import cancel_and_wait
from session_store import SessionStore, layout, open_store
from session_store.codec import decode
from webapi.server import free_port

console = Console()
FAULTS = (
    "kill_brain",
    "kill_brain_mid_model",
    "kill_brain_mid_tool",
    "stop_brain",
    "kill_hands",
    "restart_nats",
    "flush_redis",
    "restart_scheduler",
    "restart_api",
)
LEASE_SECONDS = 2.0


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    sessions: int = 12
    brains: int = 3
    hands: int = 2
    faults: tuple[str, ...] = FAULTS
    fault_every: float = 2.0
    #: faults after the first round until this many Brain kills (0: until work is done)
    brain_kills: int = 0
    deadline: float = 240.0
    work: Path = Path("/tmp/bh-chaos")


@dataclass
class ChaosReport:
    seed: int
    schedule: list[tuple[float, str, str]] = field(default_factory=list)
    submitted: int = 0
    completed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    #: tasks failed by the restart limit: a phase whose executor was killed that often
    restart_limited: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    executions: Counter[str] = field(default_factory=Counter)
    applications: Counter[str] = field(default_factory=Counter)
    fenced_refusals: int = 0
    stale_commits: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


async def run_chaos(config: ChaosConfig) -> ChaosReport:
    """One seeded run; the report lists every violation found."""
    async with chaos_services() as services:
        return await _run(config, services)


async def _run(config: ChaosConfig, services: ChaosServices) -> ChaosReport:
    rng = random.Random(config.seed)
    report = ChaosReport(seed=config.seed)
    work = config.work / f"run-{config.seed}-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True)
    namespace = f"c{uuid.uuid4().hex[:8]}"
    port = free_port()
    token = secrets.token_urlsafe(24)
    store_url = f"sqlite:///{work / 'store.db'}"
    ledger = work / "ledger"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "BH_STORE_URL": store_url,
        "BH_NAMESPACE": namespace,
        "BH_SESSION_API_TOKEN": token,
        "BH_HANDS_SANDBOX": "process",
        "BH_HANDS_PROCESS_ROOT": str(work / "runs"),
        "BH_HANDS_ACK_WAIT": "5",
        "BH_HANDS_SECRET": secrets.token_hex(16),
        **services.brain_env(),
    }
    store = await open_store(store_url)
    await store.tools.register(_count_tool(ledger))
    fleet = Fleet(work, env, _argv(config, port))
    for name in fleet.argv:
        fleet.start(name)
    api = f"http://127.0.0.1:{port}"
    try:
        await until_up(f"{api}/healthz")
        every_kind = asyncio.Event()
        submitting = asyncio.create_task(_submit_all(api, token, config, rng, report))
        faults = asyncio.create_task(_inject(fleet, services, config, rng, report, env, every_kind))
        await submitting
        await asyncio.wait_for(every_kind.wait(), config.deadline)
        await _settle(store, config, report)
        for error in await cancel_and_wait(faults):
            raise error
    finally:
        fleet.stop_all()
    report.fenced_refusals = await asyncio.to_thread(_fenced_in_logs, work)
    await _check(store, ledger, services.ledger(), config, report)
    await store.close()
    return report


def _argv(config: ChaosConfig, port: int) -> dict[str, list[str]]:
    python = sys.executable
    argv = {
        "scheduler": [python, "-m", "scheduler", "--reconcile-seconds", "2"],
        "session-api": [python, "-m", "session_api", "--port", str(port)],
    }
    brain = [python, "-m", "brain", "worker", "--plugin", "examples.chaos.workload:plugin"]
    brain += ["--plugin", "examples.emails.tasks:plugin"]
    brain += ["--sandboxed", "count", "--lease-seconds", str(LEASE_SECONDS)]
    for n in range(1, config.brains + 1):
        argv[f"brain-{n}"] = brain
    for n in range(1, config.hands + 1):
        argv[f"hands-{n}"] = [python, "-m", "hands", "--sandbox", "process"]
    return argv


def _count_tool(ledger: Path) -> ToolDefinition:
    command = (sys.executable, "-m", "examples.chaos.tool")
    return ToolDefinition(
        name="count",
        version=1,
        parameters={
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "fail": {"type": "boolean"}},
            "additionalProperties": False,
        },
        replay=ReplayPolicy.UNSAFE,  # executing twice would be a violation
        timeout_s=30,
        command=command,
        query=command,
        config={"LEDGER": str(ledger)},
        image="process:examples.chaos.tool",
        image_id="process:examples.chaos.tool",
    )


def _workload(rng: random.Random, number: int) -> dict[str, Any]:
    shape = rng.choice(["agent"] * 3 + ["short", "long", "sleepy", "failing", "fanout"])
    if shape == "agent":  # model rounds: count (Hands), five emails (Brain), count, answer
        return {"request_id": f"r{number}", "input": {"text": "Count, then notify all five."}}
    if shape == "short":
        task = {"kind": "steps", "input": {"n": 2, "seconds": 0.1}}
    elif shape == "long":
        task = {"kind": "steps", "input": {"n": 4, "seconds": 1.0}}
    elif shape == "sleepy":
        task = {"kind": "steps", "input": {"n": 3, "seconds": 0.1, "sleep": 0.5}}
    elif shape == "failing":
        task = {"kind": "steps", "input": {"n": 3, "seconds": 0.1, "fail": True}}
    else:
        task = {"kind": "fanout", "input": {"width": 3, "child": {"n": 2, "seconds": 0.2}}}
    return {"request_id": f"r{number}", "input": {"task": task}}


async def _submit_all(
    api: str, token: str, config: ChaosConfig, rng: random.Random, report: ChaosReport
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    bodies = [_workload(rng, n) for n in range(config.sessions)]
    async with httpx.AsyncClient(headers=headers, timeout=10) as client:
        for number, body in enumerate(bodies):
            url = f"{api}/v1/sessions/s{number}/submissions"
            while True:  # the API may be down: the same request_id again is safe
                with contextlib.suppress(httpx.HTTPError):
                    answer = await client.post(url, json=body)
                    if answer.status_code in (200, 201):
                        report.submitted += 1
                        break
                await asyncio.sleep(0.3)
            # spread over the faults' period, so they hit work in flight
            rounds = len(config.faults) + 1.5 * config.brain_kills
            await asyncio.sleep(max(0.2, rounds * config.fault_every / config.sessions))


async def _inject(
    fleet: Fleet,
    services: ChaosServices,
    config: ChaosConfig,
    rng: random.Random,
    report: ChaosReport,
    env: dict[str, str],
    every_kind: asyncio.Event,
) -> None:
    started = time.monotonic()
    order = list(config.faults)
    rng.shuffle(order)  # every kind once first, then drawn at random;
    order.sort(key=lambda kind: "_mid_" not in kind)  # kills inside calls while work flows
    brains = [n for n in fleet.argv if n.startswith("brain-")]
    hands = [n for n in fleet.argv if n.startswith("hands-")]
    killed_rounds: set[str] = set()
    while True:
        await asyncio.sleep(config.fault_every * rng.uniform(0.5, 1.5))
        more_kills = ["kill_brain", "kill_brain_mid_model", "kill_brain_mid_tool"]
        fault = order.pop(0) if order else rng.choice([*config.faults, *more_kills])
        target = ""
        if fault == "kill_brain":
            target = rng.choice(brains)
            fleet.kill(target)
            fleet.start(target)
        elif fault in ("kill_brain_mid_model", "kill_brain_mid_tool"):
            watched = services.model if fault == "kill_brain_mid_model" else services.email
            call = MODEL_CALL if fault == "kill_brain_mid_model" else EMAIL_SEND
            target = await _kill_in_call(fleet, brains, watched, call, rng, killed_rounds)
        elif fault == "stop_brain":
            target = rng.choice(brains)
            fleet.signal(target, signal.SIGSTOP)
            await asyncio.sleep(LEASE_SECONDS * 2)  # past its lease
            fleet.signal(target, signal.SIGCONT)
        elif fault == "kill_hands":
            target = rng.choice(hands)
            fleet.kill(target)
            fleet.start(target)
        elif fault == "restart_nats":
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "bh.cli", "dev", "restart", "nats"],
                capture_output=True,
                check=False,
            )
            target = "ok" if done.returncode == 0 else "not ours: skipped"
        elif fault == "flush_redis":
            client = redis.asyncio.Redis.from_url(env["BH_REDIS_URL"])
            await client.flushall()
            await client.aclose()
        else:
            target = "scheduler" if fault == "restart_scheduler" else "session-api"
            fleet.kill(target)
            fleet.start(target)
        report.schedule.append((round(time.monotonic() - started, 2), fault, target))
        kills = sum(1 for _, kind, _ in report.schedule if kind.startswith("kill_brain"))
        if not order and kills >= config.brain_kills:
            every_kind.set()


async def _kill_in_call(
    fleet: Fleet,
    brains: list[str],
    watched: InFlight,
    call: str,
    rng: random.Random,
    killed: set[str],
) -> str:
    """SIGKILL (and restart) a Brain while it is inside ``call``: the first one seen in
    it within 30 s; a random Brain, said so, when none is."""
    by_pid = {fleet.processes[name].pid: name for name in brains}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for port, request_id in watched.calls(call):
            # A model call is named task.round.attempt: kill each round once, so the
            # kills do not add up to the crash limit that fails a phase on purpose.
            round_ = request_id.rpartition(".a")[0]
            if round_ and round_ in killed:
                continue
            owner = await asyncio.to_thread(owner_of, port)
            name = by_pid.get(owner) if owner is not None else None
            if name is not None:
                fleet.kill(name)
                fleet.start(name)
                killed.add(round_)
                return f"{name} (in {call} {request_id})".rstrip()
        await asyncio.sleep(0.05)
    name = rng.choice(brains)
    fleet.kill(name)
    fleet.start(name)
    return f"{name} (nothing in {call} for 30 s: killed anyway)"


async def _settle(store: SessionStore, config: ChaosConfig, report: ChaosReport) -> None:
    deadline = time.monotonic() + config.deadline
    pending = {f"s{n}" for n in range(config.sessions)}
    while pending and time.monotonic() < deadline:
        for session_id in sorted(pending):
            handle = await store.session(session_id)
            submission = await handle.submission(f"r{session_id[1:]}")
            if submission is not None and submission.status.is_final:
                pending.discard(session_id)
        await asyncio.sleep(1)


async def _check(
    store: SessionStore, ledger: Path, emails: Ledger, config: ChaosConfig, report: ChaosReport
) -> None:
    for n in range(config.sessions):
        session_id, request_id = f"s{n}", f"r{n}"
        handle = await store.session(session_id)
        submission = await handle.submission(request_id)
        if submission is None:
            report.lost.append(session_id)
            continue
        if not submission.status.is_final:
            report.stuck.append(session_id)
        elif submission.status.value == "answered":
            report.completed += 1
        else:
            error = submission.error
            report.failed[session_id] = error.message if error else submission.status.value
        await _check_log(store, session_id, report)
        report.violations += await _unexpected_failures(store, session_id, report)
    report.executions.update(await asyncio.to_thread(_ledger, ledger))
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
    unexpected = [s for s, why in report.failed.items() if not _as_designed(why)]
    report.violations += [f"failed for another reason: {s}: {report.failed[s]}" for s in unexpected]
    never = sorted(set(report.executions) - set(report.applications))
    report.violations += [f"executed, result never applied: {op}" for op in never]


#: Failures the design calls for: the workload's failing tool, and the restart limit
#: (a phase whose executor was killed ``max_crashes`` times fails its task: under
#: dozens of Brain kills, a phase is sometimes in every one of them).
_DESIGNED = ("asked to fail", "crashed its executor")


def _as_designed(why: str) -> bool:
    return any(reason in why for reason in _DESIGNED)


async def _unexpected_failures(
    store: SessionStore, session_id: str, report: ChaosReport
) -> list[str]:
    """Tasks (subtasks included) that failed for a reason the design does not call for."""
    found = []
    for item, data in await store.backend.items(layout.log_partition(session_id)):
        record = decode(data, CommitRecord, where=item)
        for task in record.commit.tasks:
            error = task.error.message if task.error else ""
            if task.outcome is None or task.outcome.value != "failed":
                continue
            if task.error is not None and task.error.code == "restart_limit":
                report.restart_limited.append(f"{session_id}/{task.id}")
            elif not _as_designed(error) and "subtask" not in error:
                found.append(f"task {session_id}/{task.id} failed: {error[:200]}")
    return found


def _fenced_in_logs(work: Path) -> int:
    """Drives a Brain dropped because a newer holder took the session (store refusal or
    lost lease), as the Brains logged them."""
    marks = ("fenced out", "lease lost")
    return sum(
        line.count(mark)
        for log in work.glob("brain-*.log")
        for line in log.read_text(errors="replace").splitlines()
        for mark in marks
    )


def _ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def _check_log(store: SessionStore, session_id: str, report: ChaosReport) -> None:
    highest = 0
    for item, data in await store.backend.items(layout.log_partition(session_id)):
        record = decode(data, CommitRecord, where=item)
        report.applications.update(record.commit.applied_operations)
        if record.claim:
            highest = max(highest, record.fence)
        elif record.writer_fence is not None and record.writer_fence < highest:
            report.stale_commits.append(f"{session_id}@{record.seq}")


def show(report: ChaosReport) -> None:
    console.print(f"[bold]seed {report.seed}[/] — fault schedule (seconds, fault, target):")
    for moment, fault, target in report.schedule:
        console.print(f"  {moment:7.2f}  {fault:18} {target}")
    console.print(
        f"sessions submitted {report.submitted}, completed {report.completed}, "
        f"failed {len(report.failed)} (as designed: a failing tool, or the restart limit), "
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
    if report.violations:
        for violation in report.violations:
            console.print(f"[red]VIOLATION[/] {violation}")
    else:
        console.print("[green]no violation[/]")


def chaos(
    seed: Annotated[int, typer.Option(help="the fault schedule's seed")] = 1,
    runs: Annotated[int, typer.Option(help="runs, seeds seed..seed+runs-1")] = 1,
    sessions: Annotated[int, typer.Option(help="sessions per run")] = 12,
    brains: Annotated[int, typer.Option(help="Brain workers")] = 3,
    hands: Annotated[int, typer.Option(help="Hands")] = 2,
    fault_every: Annotated[float, typer.Option(help="mean seconds between faults")] = 2.0,
    brain_kills: Annotated[int, typer.Option(help="go on until this many Brain kills")] = 0,
    deadline: Annotated[float, typer.Option(help="seconds to wait for the work")] = 600,
) -> None:
    """Run the system under seeded faults and check the invariants (needs `bh dev up`)."""
    failed = 0
    for offset in range(runs):
        config = ChaosConfig(
            seed=seed + offset,
            sessions=sessions,
            brains=brains,
            hands=hands,
            fault_every=fault_every,
            brain_kills=brain_kills,
            deadline=deadline,
        )
        report = asyncio.run(run_chaos(config))
        show(report)
        failed += not report.ok
    if failed:
        raise typer.Exit(1)
