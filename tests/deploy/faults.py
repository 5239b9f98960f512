"""The faults the deploy test injects into the compose deployment, each returning what it
hit (for the run's schedule, as ``bh chaos`` prints it).

- ``scale``: ``docker-compose up --scale`` (removed containers get SIGTERM);
- ``kill_brain_mid_tool``: SIGKILL the Brain's process from the host inside an email
  send (found through the email relay: the client port the service saw, the container
  behind it); its restart policy must start it again by itself — ``docker kill`` would
  not do (Docker takes it for a manual stop, issue 36);
- ``kill_hands_mid_run``: the same to a Hands while a sandboxed run is in flight;
- ``partition_brain``: ``docker network disconnect`` a Brain from the deployment's
  network (Redis, the store, NATS; the model and email service stay reachable) past its
  lease, then reconnect it;
- ``partition_hands``: drop the Hands' NATS traffic mid-run, then heal: they live in the
  host's network namespace, so it is an iptables rule on the NATS port published on
  the host's loopback, which cuts every Hands (and the Hands API) of this host;
- ``partition_schedulers``: ``docker network disconnect`` both schedulers for 23 s,
  then reconnect them: each must be ready again within ``RECOVERY`` as the same
  process — its NATS and Redis connections died silently and its clients must notice
  and reconnect (issue 31, finding 15: both stayed unready for minutes, until restarted);
- ``stop_nats_node``: stop one NATS server (the streams are R3), start it again;
- ``restart``: Redis (its data lost: no persistence) or the S3 server (data kept);
- ``rolling_restart``: every Brain in turn, SIGTERM (leases handed back), then started.

After each fault every service must be ready again within ``RECOVERY`` seconds; one that
is not is a violation (with what its ``/readyz`` said), and is restarted — what an
orchestrator acting on readiness would do — so the rest of the run still counts.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bh.chaos_services import EMAIL_SEND, ChaosServices
from hands.sandbox import LABEL_OWNER
from tests.deploy.deployment import Deployment
from tests.deploy.relay import Relay

#: the Brains' lease (compose.test.yaml: --lease-seconds 5); a partition lasts past it
LEASE_SECONDS = 5.0
#: how long a Brain has to exit after SIGTERM (compose.yaml's stop_grace_period)
GRACE = 30
#: how long a fault waits for the moment it wants (a send, a run) before hitting anyway
WITHIN = 12.0
#: how long every service has to be ready again after a fault
RECOVERY = 20.0
SERVICES = ("scheduler-1", "scheduler-2", "session-api", "hands-api", "brain", "hands")
#: how long ``partition_schedulers`` cuts them off (the review's run: 23 s)
PARTITION_SECONDS = 23.0


@dataclass
class Faults:
    deployment: Deployment
    services: ChaosServices
    email_relay: Relay
    started: float = field(default_factory=time.monotonic)
    #: (seconds into the run, fault, what it hit), as ``ChaosReport.schedule``
    schedule: list[tuple[float, str, str]] = field(default_factory=list)
    #: services not ready again after a fault
    violations: list[str] = field(default_factory=list)

    async def run(self, name: str, fault: Callable[[], Awaitable[str]]) -> None:
        moment = round(time.monotonic() - self.started, 2)
        self.schedule.append((moment, name, await fault()))
        print(f"{moment:7.1f} s  {name:22} {self.schedule[-1][2]}", flush=True)
        await self.recovered(name)

    async def recovered(self, fault: str) -> None:
        for service in SERVICES:
            unready = await self.deployment.unready(service, RECOVERY)
            for container, said in unready:
                self.violations.append(
                    f"{container.name} not ready {RECOVERY:.0f} s after {fault}: {said}"
                )
                print(f"VIOLATION {self.violations[-1]} (restarting it)", flush=True)
                print(await _tail(container), flush=True)  # why: its last words
                await asyncio.to_thread(container.restart, timeout=30)
            if unready:
                await self.deployment.healthy(service, len(await self.deployment.found(service)))

    # -- scale ---------------------------------------------------------------------------

    async def scale(self, service: str, count: int) -> str:
        before = len(await self.deployment.found(service))
        await self.deployment.scale(service, count)
        return f"{service} {before} -> {count}"

    # -- kills ---------------------------------------------------------------------------

    async def kill_brain_mid_tool(self) -> str:
        brain, why = await self._brain_in_send()
        await self._killed(brain, "brain")
        return f"{brain.name} ({why})"

    async def kill_hands_mid_run(self) -> str:
        running = await self._until(self._runs)
        hands = random.choice(await self.deployment.found("hands"))
        await self._killed(hands, "hands")
        return f"{hands.name} ({f'{running} runs in flight' if running else 'no run seen'})"

    async def _killed(self, container: Any, service: str) -> None:
        """SIGKILL ``container``'s process; its restart policy must bring it back by
        itself (a violation if not: then it is started, so the rest of the run counts)."""
        if not await self.deployment.killed_and_restarted(container, within=RECOVERY):
            self.violations.append(f"{container.name} was not restarted after its SIGKILL")
            print(f"VIOLATION {self.violations[-1]} (starting it)", flush=True)
            await asyncio.to_thread(container.start)
        count = len(await self.deployment.found(service))
        await self.deployment.healthy(service, count)

    # -- partitions ----------------------------------------------------------------------

    async def partition_brain(self) -> str:
        brain, why = await self._brain_in_send()
        network = self.deployment.client.networks.get(self.deployment.env["BH_DEPLOY_NETWORK"])
        await asyncio.to_thread(network.disconnect, brain)
        await asyncio.sleep(LEASE_SECONDS * 3)  # past its lease: another Brain takes over
        await asyncio.to_thread(network.connect, brain, aliases=["brain"])
        await self.deployment.healthy("brain", len(await self.deployment.found("brain")))
        return f"{brain.name} ({why}) cut off for {LEASE_SECONDS * 3:.0f} s"

    async def partition_hands(self) -> str:
        running = await self._until(self._runs)
        port = self.deployment.env["BH_NATS_PORT"]
        rules = [
            ["INPUT", "-i", "lo", "-p", "tcp", "--dport", port, "-j", "DROP"],
            ["INPUT", "-i", "lo", "-p", "tcp", "--sport", port, "-j", "DROP"],
        ]
        for rule in rules:
            _iptables("-I", *rule)
        try:
            await asyncio.sleep(12)  # past the dispatch's ack wait (5 s)
        finally:
            for rule in rules:
                _iptables("-D", *rule)
        await self.deployment.healthy("hands", len(await self.deployment.found("hands")))
        return f"the Hands' NATS port {port} dropped for 12 s ({running} runs in flight)"

    async def partition_schedulers(self) -> str:
        """Both schedulers cut off from everything (Redis, the store, NATS) for as long
        as the review's run did, then back: ready again without a restart."""
        network = self.deployment.client.networks.get(self.deployment.env["BH_DEPLOY_NETWORK"])
        schedulers = [
            container
            for service in ("scheduler-1", "scheduler-2")
            for container in await self.deployment.found(service)
        ]
        started = {container.name: _started_at(container) for container in schedulers}
        for container in schedulers:
            await asyncio.to_thread(network.disconnect, container)
        await asyncio.sleep(PARTITION_SECONDS)
        for container in schedulers:
            service = container.labels.get("com.docker.compose.service", container.name)
            await asyncio.to_thread(network.connect, container, aliases=[service])
        for container in schedulers:
            await self.recovered_in_place(container, started[container.name])
        names = ", ".join(sorted(started))
        return f"{names} cut off for {PARTITION_SECONDS:.0f} s"

    async def recovered_in_place(self, container: Any, started_at: str) -> None:
        """A violation unless ``container`` is ready within ``RECOVERY`` as the process
        it was (its restart by the readiness limit would also bring it back, later)."""
        service = container.labels.get("com.docker.compose.service", container.name)
        for unready, said in await self.deployment.unready(service, RECOVERY):
            if unready.name == container.name:
                self.violations.append(
                    f"{container.name} not ready {RECOVERY:.0f} s after its partition "
                    f"healed: {said}"
                )
        await asyncio.to_thread(container.reload)
        if _started_at(container) != started_at:
            self.violations.append(
                f"{container.name} was restarted after its partition, not healed in place"
            )

    # -- infrastructure ------------------------------------------------------------------

    async def stop_nats_node(self, name: str = "nats-1") -> str:
        node = (await self.deployment.found(name))[0]
        await asyncio.to_thread(node.stop, timeout=10)
        await asyncio.sleep(10)  # the streams keep working on the two others (R3)
        await asyncio.to_thread(node.start)
        await self.deployment.healthy(name, 1)
        return f"{node.name} stopped for 10 s"

    async def restart(self, service: str) -> str:
        container = (await self.deployment.found(service))[0]
        await asyncio.to_thread(container.restart, timeout=30)
        await self.deployment.healthy(service, 1, within=180)
        return str(container.name)

    async def rolling_restart(self, service: str = "brain") -> str:
        """Each in turn: SIGTERM, which must end it within the grace period (its
        leases handed back; a SIGKILL at the end of the grace is a violation), then
        started again and healthy before the next."""
        said = []
        count = len(await self.deployment.found(service))
        await asyncio.to_thread(self.deployment.save_logs)
        for container in await self.deployment.found(service):
            began = time.monotonic()
            await asyncio.to_thread(container.stop, timeout=GRACE)  # SIGTERM, then SIGKILL
            took = time.monotonic() - began
            await asyncio.to_thread(container.reload)
            code = container.attrs["State"]["ExitCode"]
            said.append(f"{container.name} exit {code} in {took:.0f} s")
            if code != 0:
                self.violations.append(
                    f"{container.name} did not exit by itself {GRACE} s after SIGTERM "
                    f"(exit {code}): its leases were not handed back"
                )
            await asyncio.to_thread(container.start)
            await self.deployment.healthy(service, count)
        return ", ".join(said)

    # -- moments -------------------------------------------------------------------------

    async def _brain_in_send(self) -> tuple[Any, str]:
        """A Brain inside an email send, or (after ``WITHIN``) the first Brain."""
        brains = await self.deployment.found("brain")
        by_address = await self.deployment.addresses(brains)
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            for port, request_id in self.services.email.calls(EMAIL_SEND):
                brain = by_address.get(self.email_relay.peers.get(port, ""))
                if brain is not None:
                    return brain, f"in {EMAIL_SEND} {request_id}".rstrip()
            await asyncio.sleep(0.05)
        return brains[0], f"nothing in {EMAIL_SEND} for {WITHIN:.0f} s: hit anyway"

    def _runs(self) -> int:
        """Sandboxed runs in flight: the run's tool containers running now."""
        owner = self.deployment.env["BH_HANDS_OWNER"]
        label = f"{LABEL_OWNER}={owner}"
        return len(self.deployment.client.containers.list(filters={"label": label}))

    async def _until(self, count: Callable[[], int]) -> int:
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            found = await asyncio.to_thread(count)
            if found:
                return found
            await asyncio.sleep(0.2)
        return 0


def _started_at(container: Any) -> str:
    """When the container's process started (a restart changes it)."""
    return str(container.attrs["State"]["StartedAt"])


def _iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", *args], check=True, capture_output=True)


async def _tail(container: Any, lines: int = 40) -> str:
    """The last ``lines`` of a container's log, indented, for a violation's report."""
    try:
        raw = await asyncio.to_thread(container.logs, tail=lines)
    except Exception as error:  # the report goes on without it
        return f"    (no log: {error!r})"
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return "\n".join(f"    {line}" for line in text.splitlines())
