"""``bh chaos``: the whole system under a seeded schedule of faults, then the invariants.

It starts the scheduler, the Session API, Brain workers and Hands (process sandbox; or
Docker, where ``count`` is the ``tool-count`` image tallying in a ledger service) as
separate processes on the dev infrastructure, with the scripted model and the example
email service served in this process (``bh.chaos_services``). It submits sessions
through the Session API — retrying with the same ``request_id`` when the API is down —
of two families: agent sessions, where the scripted model answers after a delay and
calls ``count`` on the Hands, the five-emails batch (subtasks; ``send_email`` runs in
the Brain), ``count`` again, then answers; and task sessions of ``examples.chaos``
(sequential sandboxed calls with durable sleeps, a deliberately failing call, fan-out
subtasks). Meanwhile it injects faults in a seeded order (``bh.chaos_plan``): SIGKILL a
Brain at a random moment, or while it is inside a model call or an email send (found by
the call's client port), SIGSTOP a Brain past its lease (at a random moment, or inside
an email send) then SIGCONT it, SIGKILL a Hands, restart nats-server (or wipe its data),
purge the dispatch and results streams, FLUSHALL or pause Redis, hold the store's write
lock for 15 to 30 s, kill and restart the scheduler and the Session API (every killed
process is restarted), forge dispatches, result events and wake jobs
(``bh.chaos_forge``), storm queued and running work with cancellations
(``bh.chaos_cancel``), pause a Hands between its claim and its run's start past the
claim, or run a Brain and a Hands with their wall clocks 30 s off (``bh.chaos_restarts``),
answer email sends after the caller's timeout, burst a session budget and a token limit
with concurrent callers (``bh.chaos_limits``), and send malformed ids to every door
(``bh.chaos_ids``). Then it reads the store, the ``count`` ledger and the email
service's ledger and reports (``bh.chaos_check``, ``bh.chaos_report``): sessions
submitted / completed / failed (with reason) / stuck; executions and applications per
operation; drives dropped by fencing vs stale-fence commits accepted; forgeries refused;
the share of sessions and operations that succeeded, which must reach a floor (a run
where everything errors must not pass). Any violation makes the run (and the command)
fail. The seed and the schedule are
printed, so a failing run can be replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from bh.chaos_cancel import CancelStorms
from bh.chaos_check import check, fenced_in_logs, ledger_counts
from bh.chaos_clients import redis_client
from bh.chaos_forge import Forger
from bh.chaos_ids import IdSweeps
from bh.chaos_infra import (
    Infra,
    pause_redis,
    purge_streams,
    restart_docker,
    restart_nats,
    store_outage,
    wipe_nats,
)
from bh.chaos_limits import LimitBursts
from bh.chaos_plan import FAULTS, FaultPlan, UnknownFault, select
from bh.chaos_report import ChaosReport, show
from bh.chaos_restarts import pause_hands_mid_start, skew_clock
from bh.chaos_services import (
    EMAIL_SEND,
    MODEL_CALL,
    ChaosServices,
    InFlight,
    chaos_services,
    owner_of,
)
from bh.deploy import service
from bh.fleet import Component, Fleet, from_table, until_up
from bh.granted_tool import register_granted, write_credentials
from contracts import ReplayPolicy
from contracts.tool import ToolDefinition
from runtime.cancellation import cancel_and_wait
from session_store import SessionStore, open_store
from webapi.server import free_port

__all__ = ["FAULTS", "ChaosConfig", "ChaosReport", "run_chaos", "show"]

LEASE_SECONDS = 2.0
#: the scheduler looks at open intents this often (re-issuing lost dispatches)
REISSUE_SECONDS = 3.0
#: how long an in-call fault waits for a Brain inside the call before hitting one anyway
IN_CALL_WITHIN = 15.0
#: ``late_service``: email sends are answered this late (the client gives up at 2 s)...
LATE_SECONDS = 2.5
#: ... for this long
LATE_WINDOW = 5.0
#: the share of eligible sessions (and of their operations) that must succeed
MIN_SUCCEEDED = 0.8


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    sessions: int = 12
    brains: int = 3
    hands: int = 2
    #: the kinds of the run (``bh.chaos_plan.select``: the Docker-only ones need
    #: ``hands_sandbox="docker"``)
    faults: tuple[str, ...] = select()
    fault_every: float = 2.0
    #: every kind this many times first
    min_each: int = 1
    #: then faults at random until this many Brain kills (0: none more)
    brain_kills: int = 0
    hands_sandbox: str = "process"
    deadline: float = 240.0
    work: Path = Path("/tmp/bh-chaos")
    #: a run fails when fewer of its eligible sessions (not designed to fail or
    #: stormed), or of their operations, succeeded
    min_succeeded: float = MIN_SUCCEEDED


async def run_chaos(config: ChaosConfig) -> ChaosReport:
    """One seeded run; the report lists every violation found."""
    async with chaos_services() as services:
        return await _run(config, services)


@dataclass
class _Run:
    """One run's processes, clients and fault state."""

    config: ChaosConfig
    services: ChaosServices
    fleet: Fleet
    report: ChaosReport
    infra: Infra
    forger: Forger
    storms: CancelStorms
    bursts: LimitBursts
    sweeps: IdSweeps
    #: set when the run ends: a fault still holding something lets go
    ending: threading.Event
    #: model rounds already killed inside (a round killed 3 times fails on purpose)
    killed_rounds: set[str]

    def named(self, prefix: str) -> list[str]:
        return [name for name in self.fleet.argv if name.startswith(prefix)]


async def _run(config: ChaosConfig, services: ChaosServices) -> ChaosReport:
    rng = random.Random(config.seed)
    report = ChaosReport(seed=config.seed)
    work = config.work / f"run-{config.seed}-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True)
    namespace = f"c{uuid.uuid4().hex[:8]}"
    port = free_port()
    token = secrets.token_urlsafe(24)
    store_path = work / "store.db"
    store_url = f"sqlite:///{store_path}"
    ledger = work / "ledger"
    env = {
        **os.environ,  # the dev stack's URLs, with the credentials they name
        "PYTHONUNBUFFERED": "1",
        "BH_STORE_URL": store_url,
        "BH_NAMESPACE": namespace,
        "BH_SESSION_API_TOKEN": token,
        "BH_HANDS_SANDBOX": config.hands_sandbox,
        "BH_HANDS_PROCESS_ROOT": str(work / "runs"),
        "BH_HANDS_ACK_WAIT": "5",
        # a claim lasts the tool's timeout plus this: short, so that a paused Hands is
        # taken over within the run (``pause_hands_mid_start``)
        "BH_HANDS_START_ALLOWANCE": "2",
        "BH_HANDS_SECRET": secrets.token_hex(16),
        "BH_HANDS_OWNER": namespace,
        **services.brain_env(),
    }
    store = await open_store(store_url)
    if config.hands_sandbox == "docker":
        env["BH_HANDS_CREDENTIALS"] = str(
            write_credentials(work / "credentials.json", {services.tally_url: services.tally_token})
        )
        await register_granted(
            store,
            env.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
            "count",
            service_url=services.tally_url,
            config={"LEDGER_URL": services.tally_url},
            owner=namespace,
            registered_by="bh chaos",
        )
    else:
        await store.tools.register(_count_tool(ledger))
    fleet = Fleet(work, env, _components(config, port))
    api = f"http://127.0.0.1:{port}"
    run = _Run(
        config,
        services,
        fleet,
        report,
        Infra(env, namespace, store_path),
        Forger(env, namespace, work),
        CancelStorms(api, token, store),
        LimitBursts(api, token, env["BH_REDIS_URL"], namespace),
        IdSweeps(api, token, env, namespace, work),
        threading.Event(),
        set(),
    )
    for name in fleet.argv:
        fleet.start(name)
    try:
        await until_up(f"{api}/healthz")
        every_kind = asyncio.Event()
        submitting = asyncio.create_task(_submit_all(api, token, config, rng, report))
        faults = asyncio.create_task(_inject(run, every_kind))
        await submitting
        waiting = asyncio.create_task(every_kind.wait())
        await asyncio.wait(
            {waiting, faults}, timeout=config.deadline, return_when=asyncio.FIRST_COMPLETED
        )
        await cancel_and_wait(waiting)
        if faults.done():
            faults.result()  # a fault that failed ends the run, with its error
        if not every_kind.is_set():  # said in the report; the checks still run
            report.incomplete = f"the fault plan was not through after {config.deadline} s"
        sessions = [f"s{n}" for n in range(config.sessions)]
        await _settle(store, sessions + run.storms.own, config, run.bursts)  # under faults
        for error in await cancel_and_wait(faults):
            if not isinstance(error, asyncio.CancelledError):
                raise error
        # a storm cut short by that cancel may have had a session accepted since
        await _settle(store, sessions + run.storms.own, config, run.bursts)
    finally:
        run.ending.set()
        fleet.stop_all()
    report.fenced_refusals = await asyncio.to_thread(fenced_in_logs, work)
    if config.hands_sandbox == "docker":  # each request for a tally is an execution
        counted = Counter(services.tallies().requests)
    else:
        counted = await asyncio.to_thread(ledger_counts, ledger)
    await check(
        store,
        config.sessions,
        counted,
        services.ledger(),
        report,
        forger=run.forger,
        storms=run.storms,
        bursts=run.bursts,
        min_succeeded=config.min_succeeded,
    )
    report.violations += run.sweeps.check()
    await store.close()
    return report


def _components(config: ChaosConfig, port: int) -> list[Component]:
    """The run's processes, from the service table (``bh.fleet.from_table``), each worker
    with a probe port of its own."""
    reissue = ("--reissue-seconds", str(REISSUE_SECONDS))
    found = [
        from_table(
            service("scheduler"),
            "scheduler",
            ("--reconcile-seconds", "2", *reissue),
            port=free_port(),
        ),
        from_table(service("session-api"), "session-api", port=port),
    ]
    brain = [
        "--plugin",
        "examples.chaos.workload:plugin",
        "--plugin",
        "examples.emails.tasks:plugin",
    ]
    brain += ["--sandboxed", "count", "--lease-seconds", str(LEASE_SECONDS)]
    found += [
        from_table(service("brain"), f"brain-{n}", brain, port=free_port())
        for n in range(1, config.brains + 1)
    ]
    found += [
        from_table(
            service("hands"), f"hands-{n}", ("--sandbox", config.hands_sandbox), port=free_port()
        )
        for n in range(1, config.hands + 1)
    ]
    return found


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
        # short: a claim (this plus the Hands' start allowance) is over soon after a
        # Hands stopped holding it (``pause_hands_mid_start``); a run takes at most 1 s
        timeout_s=8,
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


def fails_by_design(body: dict[str, Any]) -> bool:
    """Whether a workload body is a session designed to fail (the failing tool)."""
    task = body["input"].get("task") if isinstance(body["input"], dict) else None
    return bool(task and task["input"].get("fail"))


async def _submit_all(
    api: str, token: str, config: ChaosConfig, rng: random.Random, report: ChaosReport
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    bodies = [_workload(rng, n) for n in range(config.sessions)]
    plan = FaultPlan.seeded(
        config.faults, random.Random(), min_each=config.min_each, brain_kills=config.brain_kills
    )
    spread = plan.expected_seconds(config.fault_every) / config.sessions
    report.meant_to_fail |= {f"s{n}" for n, body in enumerate(bodies) if fails_by_design(body)}
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
            await asyncio.sleep(max(0.2, spread))


async def _inject(run: _Run, every_kind: asyncio.Event) -> None:
    config = run.config
    rng = random.Random(f"faults-{config.seed}")
    plan = FaultPlan.seeded(
        config.faults, rng, min_each=config.min_each, brain_kills=config.brain_kills
    )
    started = time.monotonic()
    while True:
        await asyncio.sleep(config.fault_every * rng.uniform(0.5, 1.5))
        fault = plan.next(rng)
        moment = round(time.monotonic() - started, 2)
        target = await _FAULTS[fault](run, rng)
        run.report.schedule.append((moment, fault, target))
        if plan.done():
            every_kind.set()


async def _kill_brain(run: _Run, rng: random.Random) -> str:
    target = rng.choice(run.named("brain-"))
    run.fleet.kill(target)
    run.fleet.start(target)
    return target


async def _kill_mid_model(run: _Run, rng: random.Random) -> str:
    return await _in_call(run, rng, run.services.model, MODEL_CALL, freeze=False)


async def _kill_mid_tool(run: _Run, rng: random.Random) -> str:
    return await _in_call(run, rng, run.services.email, EMAIL_SEND, freeze=False)


async def _freeze_mid_tool(run: _Run, rng: random.Random) -> str:
    return await _in_call(run, rng, run.services.email, EMAIL_SEND, freeze=True)


async def _stop_brain(run: _Run, rng: random.Random) -> str:
    target = rng.choice(run.named("brain-"))
    await _freeze(run.fleet, target)
    return target


async def _freeze(fleet: Fleet, name: str) -> None:
    """SIGSTOP past the lease (2 s) and its takeover margin, then SIGCONT."""
    fleet.signal(name, signal.SIGSTOP)
    await asyncio.sleep(LEASE_SECONDS * 2)
    fleet.signal(name, signal.SIGCONT)


async def _kill_hands(run: _Run, rng: random.Random) -> str:
    target = rng.choice(run.named("hands-"))
    run.fleet.kill(target)
    run.fleet.start(target)
    return target


async def _restart(run: _Run, name: str) -> str:
    run.fleet.kill(name)
    run.fleet.start(name)
    return name


async def _late_service(run: _Run, rng: random.Random) -> str:
    """Email sends reach the service after the caller gave up (its 2 s timeout): the
    Brain's query must not find "nothing" and send again while the first may still land
    (issue 31, defect 2)."""
    late = run.services.email.late
    late[EMAIL_SEND] = LATE_SECONDS
    try:
        await asyncio.sleep(LATE_WINDOW)
    finally:
        late.pop(EMAIL_SEND, None)
    return f"email sends served {LATE_SECONDS:g} s late, the caller gone, for {LATE_WINDOW:g} s"


async def _flush_redis(run: _Run, rng: random.Random) -> str:
    client = redis_client(run.infra.env["BH_REDIS_URL"])
    try:
        await client.flushall()
    finally:
        await client.aclose()
    return ""


def _a_session(run: _Run, rng: random.Random) -> str:
    return f"s{rng.randrange(max(run.report.submitted, 1))}"


Fault = Any  # async (run, rng) -> what it did
_FAULTS: dict[str, Fault] = {
    "kill_brain": _kill_brain,
    "kill_brain_mid_model": _kill_mid_model,
    "kill_brain_mid_tool": _kill_mid_tool,
    "stop_brain": _stop_brain,
    "freeze_brain_mid_tool": _freeze_mid_tool,
    "kill_hands": _kill_hands,
    "restart_nats": lambda run, rng: restart_nats(),
    "flush_redis": _flush_redis,
    "restart_scheduler": lambda run, rng: _restart(run, "scheduler"),
    "restart_api": lambda run, rng: _restart(run, "session-api"),
    "purge_streams": lambda run, rng: purge_streams(run.infra),
    "wipe_nats": lambda run, rng: wipe_nats(run.infra),
    "store_outage": lambda run, rng: store_outage(run.infra, rng, run.ending),
    "pause_redis": lambda run, rng: pause_redis(run.infra, rng),
    "forge_dispatch": lambda run, rng: run.forger.dispatch(_a_session(run, rng)),
    "forge_result": lambda run, rng: run.forger.result(_a_session(run, rng)),
    "forge_wake": lambda run, rng: run.forger.wake(rng),
    "cancel_storm": lambda run, rng: run.storms.storm(run.report.submitted, rng),
    "pause_hands_mid_start": lambda run, rng: pause_hands_mid_start(
        run.fleet, run.named("hands-"), rng
    ),
    "late_service": _late_service,
    "limit_burst": lambda run, rng: run.bursts.burst(),
    "skew_clock": lambda run, rng: skew_clock(
        run.fleet, run.named("brain-"), run.named("hands-"), rng
    ),
    "malformed_ids": lambda run, rng: run.sweeps.sweep(),
    "restart_docker": lambda run, rng: restart_docker(run.infra),
}
assert set(_FAULTS) == set(FAULTS)


async def _in_call(
    run: _Run, rng: random.Random, watched: InFlight, call: str, *, freeze: bool
) -> str:
    """SIGKILL (and restart) a Brain — or, with ``freeze``, SIGSTOP it past its lease,
    then SIGCONT — while it is inside ``call``: the first one seen in it in 15 s;
    a random Brain, said so, when none is."""
    brains = run.named("brain-")
    by_pid = {run.fleet.processes[name].pid: name for name in brains}
    deadline = time.monotonic() + IN_CALL_WITHIN
    while time.monotonic() < deadline:
        for port, request_id in watched.calls(call):
            # A model call is named task.round.attempt: kill each round once, so the
            # kills do not add up to the crash limit that fails a phase on purpose.
            round_ = request_id.rpartition(".a")[0]
            if round_ and round_ in run.killed_rounds:
                continue
            owner = await asyncio.to_thread(owner_of, port)
            name = by_pid.get(owner) if owner is not None else None
            if name is not None:
                await _hit(run.fleet, name, freeze=freeze)
                run.killed_rounds.add(round_)
                return f"{name} (in {call} {request_id})".rstrip()
        await asyncio.sleep(0.05)
    name = rng.choice(brains)
    await _hit(run.fleet, name, freeze=freeze)
    return f"{name} (nothing in {call} for {IN_CALL_WITHIN:.0f} s: hit anyway)"


async def _hit(fleet: Fleet, name: str, *, freeze: bool) -> None:
    if freeze:
        await _freeze(fleet, name)
    else:
        fleet.kill(name)
        fleet.start(name)


async def _settle(
    store: SessionStore, sessions: list[str], config: ChaosConfig, bursts: LimitBursts
) -> None:
    deadline = time.monotonic() + config.deadline
    pending = {(s, f"r{s[1:]}") for s in sessions}
    pending |= {(s, request) for s in bursts.own for request in bursts.requests(s)}
    while pending and time.monotonic() < deadline:
        for session_id, request_id in sorted(pending):
            handle = await store.session(session_id)
            submission = await handle.submission(request_id)
            if submission is not None and submission.status.is_final:
                pending.discard((session_id, request_id))
        if pending:
            await asyncio.sleep(1)


def chaos(
    seed: Annotated[int, typer.Option(help="the fault schedule's seed")] = 1,
    runs: Annotated[int, typer.Option(help="runs, seeds seed..seed+runs-1")] = 1,
    sessions: Annotated[int, typer.Option(help="sessions per run")] = 12,
    brains: Annotated[int, typer.Option(help="Brain workers")] = 3,
    hands: Annotated[int, typer.Option(help="Hands")] = 2,
    fault_every: Annotated[float, typer.Option(help="mean seconds between faults")] = 2.0,
    brain_kills: Annotated[int, typer.Option(help="go on until this many Brain kills")] = 0,
    min_each: Annotated[int, typer.Option(help="every fault kind at least this often")] = 1,
    faults: Annotated[
        list[str] | None, typer.Option("--fault", help="only this kind (repeatable)")
    ] = None,
    skip: Annotated[
        list[str] | None, typer.Option("--skip-fault", help="not this kind (repeatable)")
    ] = None,
    hands_sandbox: Annotated[
        str, typer.Option(help="process, or docker (enables restart_docker)")
    ] = "process",
    deadline: Annotated[float, typer.Option(help="seconds to wait for the work")] = 600,
    min_succeeded: Annotated[
        float, typer.Option(help="the share of eligible sessions and operations to succeed")
    ] = MIN_SUCCEEDED,
) -> None:
    """Run the system under seeded faults and check the invariants (needs `bh dev up`).

    Fault kinds: see docs/chaos.md (`bh.chaos_plan.FAULTS`); restart_docker needs
    --hands-sandbox docker (the count tool then runs in containers: `bh dev up --require
    docker` first)."""
    if hands_sandbox not in ("process", "docker"):
        raise typer.BadParameter("--hands-sandbox is process or docker")
    try:
        kinds = select(faults or (), skip or (), sandbox=hands_sandbox)
    except UnknownFault as error:
        raise typer.BadParameter(str(error)) from None
    failed = 0
    for offset in range(runs):
        config = ChaosConfig(
            seed=seed + offset,
            sessions=sessions,
            brains=brains,
            hands=hands,
            faults=kinds,
            fault_every=fault_every,
            min_each=min_each,
            brain_kills=brain_kills,
            hands_sandbox=hands_sandbox,
            deadline=deadline,
            min_succeeded=min_succeeded,
        )
        report = asyncio.run(run_chaos(config))
        show(report)
        failed += not report.ok
    if failed:
        raise typer.Exit(1)
