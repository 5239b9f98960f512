"""The offline compose deployment of one test run: brought up under a project name of its
own, scaled, its containers found, signalled, partitioned, and torn down with its
volumes, networks and the sandbox containers its Hands started.

The files: ``infra/compose/compose.yaml`` + ``compose.offline.yaml`` (the images built
here) + ``tests/deploy/compose.test.yaml`` (the workload, several Hands on one host).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]

from hands.egress.firewall import BridgeFirewall
from hands.sandbox import LABEL_OWNER
from tests.support.processes import ROOT

COMPOSE = ROOT / "infra" / "compose"
FILES = (
    COMPOSE / "compose.yaml",
    COMPOSE / "compose.offline.yaml",
    Path(__file__).with_name("compose.test.yaml"),
)
_PROJECT = "com.docker.compose.project"
_SERVICE = "com.docker.compose.service"


class DeployError(Exception):
    """docker-compose or a container did not do what the run needed."""


@dataclass
class Deployment:
    project: str
    #: docker-compose's environment: the files' ${...} and the variables passed through
    env: dict[str, str]
    #: where the containers' logs are kept (``<service>-<id>.log``)
    work: Path
    client: Any = field(default_factory=docker.from_env)

    # -- compose -------------------------------------------------------------------------

    def compose(self, *args: str, timeout: float = 300) -> str:
        files = [arg for path in FILES for arg in ("-f", str(path))]
        done = subprocess.run(
            ["docker-compose", "-p", self.project, *files, *args],
            cwd=COMPOSE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise DeployError(f"docker-compose {' '.join(args)}: {done.stderr[-3000:]}")
        return done.stdout

    def up(self, brains: int, hands: int) -> None:
        self.compose("up", "-d", "--scale", f"brain={brains}", "--scale", f"hands={hands}")

    async def scale(self, service: str, count: int) -> None:
        """``--scale``: new containers started, extra ones stopped (SIGTERM) and removed;
        back when ``count`` containers are healthy."""
        await asyncio.to_thread(self.save_logs)  # a removed container takes its log with it
        arguments = ("up", "-d", "--no-deps", "--no-recreate", "--scale", f"{service}={count}")
        await asyncio.to_thread(self.compose, *arguments, service)
        await self.healthy(service, count)

    def down(self) -> None:
        self.save_logs()
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "10")

    # -- containers ----------------------------------------------------------------------

    async def found(self, service: str) -> list[Any]:
        """``containers``, off the event loop: the test's loop also serves the model and
        the email service, which must not wait for the engine's answers."""
        return await asyncio.to_thread(self.containers, service)

    def containers(self, service: str, *, running: bool = True) -> list[Any]:
        labels = [f"{_PROJECT}={self.project}", f"{_SERVICE}={service}"]
        found = self.client.containers.list(all=not running, filters={"label": labels})
        return sorted(found, key=lambda c: c.name)

    async def healthy(self, service: str, count: int, within: float = 120) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            states = await asyncio.to_thread(self._states, service)
            if len(states) == count and all(state == "healthy" for state in states):
                return
            await asyncio.sleep(1)
        raise DeployError(f"{service}: not {count} healthy in {within:.0f} s: {states}")

    async def unready(self, service: str, within: float) -> list[tuple[Any, str]]:
        """The containers of ``service`` not healthy after ``within`` seconds, each with
        what its last healthcheck said."""
        deadline = time.monotonic() + within
        while True:
            found = await asyncio.to_thread(self._unhealthy, service)
            if not found or time.monotonic() > deadline:
                return found
            await asyncio.sleep(1)

    def _states(self, service: str) -> list[str]:
        return [_health(c) for c in self.containers(service)]

    def _unhealthy(self, service: str) -> list[tuple[Any, str]]:
        return [(c, _last_check(c)) for c in self.containers(service) if _health(c) != "healthy"]

    async def killed_and_restarted(self, container: Any, within: float) -> bool:
        """SIGKILL the container's process from the host (a crash, not ``docker kill``,
        which Docker takes for a manual stop and never restarts); whether its restart
        policy started it again within ``within`` seconds, by itself."""
        await asyncio.to_thread(container.reload)
        before = int(container.attrs["RestartCount"])
        os.kill(int(container.attrs["State"]["Pid"]), signal.SIGKILL)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.to_thread(container.reload)
            if int(container.attrs["RestartCount"]) > before and container.status == "running":
                return True
            await asyncio.sleep(0.5)
        return False

    async def addresses(self, containers: list[Any]) -> dict[str, Any]:
        """Each container by its address on the network of the services outside."""

        def read() -> dict[str, Any]:
            found = {}
            for container in containers:
                container.reload()
                networks = container.attrs["NetworkSettings"]["Networks"]
                address = (networks.get(self.env["BH_OUTSIDE_NETWORK"]) or {}).get("IPAddress")
                if address:
                    found[address] = container
            return found

        return await asyncio.to_thread(read)

    def save_logs(self) -> None:
        """Each container's log (so far) in ``work``, as ``<service>-<id>.log``."""
        for container in self.client.containers.list(
            all=True, filters={"label": f"{_PROJECT}={self.project}"}
        ):
            service = container.labels.get(_SERVICE, "unknown")
            with contextlib.suppress(docker.errors.APIError):
                text = container.logs(stdout=True, stderr=True)
                (self.work / f"{service}-{container.short_id}.log").write_bytes(text)

    # -- what the run adds around compose -------------------------------------------------

    def make_networks(self) -> str:
        """The deployment's network and the one its Brains reach the services outside it
        on, made before ``up`` so that the test's relays listen first: that one's gateway
        address."""
        self.client.networks.create(self.env["BH_DEPLOY_NETWORK"], driver="bridge")
        outside = self.client.networks.create(self.env["BH_OUTSIDE_NETWORK"], driver="bridge")
        outside.reload()
        return str(outside.attrs["IPAM"]["Config"][0]["Gateway"])

    async def clean(self) -> list[str]:
        """What compose does not remove: the run's network, its egress network with the
        bridge firewall's chain, and the sandbox containers its Hands started; what
        could not be removed, said (an engine that keeps a stale endpoint refuses to
        remove an empty network)."""
        owner = self.env["BH_HANDS_OWNER"]
        egress = self.env["BH_EGRESS_NETWORK"]
        for container in self.client.containers.list(
            all=True, filters={"label": f"{LABEL_OWNER}={owner}"}
        ):
            for network in _called(self.client, egress):
                with contextlib.suppress(docker.errors.APIError):
                    network.disconnect(container, force=True)
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)
        left = []
        for name in (egress, self.env["BH_DEPLOY_NETWORK"], self.env["BH_OUTSIDE_NETWORK"]):
            for network in _called(self.client, name):
                bridge = f"br-{network.id[:12]}"
                with contextlib.suppress(Exception):
                    await BridgeFirewall(interface=bridge, address="0.0.0.0", port=1).remove()
                if not await _removed(network):
                    left.append(f"network {name} (the engine still counts an endpoint on it)")
        return left


def _called(client: Any, name: str) -> list[Any]:
    """The networks named exactly ``name``: Hands starting together may create twins."""
    return [n for n in client.networks.list(names=[name]) if n.name == name]


async def _removed(network: Any, tries: int = 10) -> bool:
    """Remove ``network``, retrying while the engine still counts a container just
    removed as attached to it; whether it is gone."""
    for _ in range(tries):
        try:
            network.remove()
            return True
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError:
            await asyncio.sleep(1)
    return False


def _last_check(container: Any) -> str:
    checks = (container.attrs["State"].get("Health") or {}).get("Log") or [{}]
    return " ".join(str(checks[-1].get("Output", "")).split())[:300]


def _health(container: Any) -> str:
    container.reload()
    state = container.attrs["State"]
    return str((state.get("Health") or {}).get("Status") or state.get("Status"))
