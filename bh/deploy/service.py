"""One deployable service, as the service table describes it: what the image runs, what
it listens on, how it is probed, what it reads from its environment, what it needs."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from bh.deploy.env import Variable


class Kind(enum.Enum):
    API = "api"  # serves HTTP on its port (probes on the same port)
    WORKER = "worker"  # long-running, probes on BH_PROBE_PORT
    JOB = "job"  # runs once to completion before the others start


@dataclass(frozen=True)
class Port:
    name: str  # "api" or "probe" (a Kubernetes port name: at most 15 characters)
    number: int  # in a container
    variable: str  # the environment variable that sets it


@dataclass(frozen=True)
class Probe:
    """``/livez`` (restart when failing) and ``/readyz`` (out of traffic) on a port."""

    port: str  # the name of one of the service's ports
    live: str = "/livez"
    ready: str = "/readyz"


@dataclass(frozen=True)
class Service:
    name: str
    kind: Kind
    #: the arguments of the image's entry point, ``bh`` (``docker run IMAGE brain``)
    command: tuple[str, ...]
    #: ``python -m`` arguments of the same command on one host (``bh up``)
    module: tuple[str, ...]
    env: tuple[Variable, ...]
    ports: tuple[Port, ...] = ()
    probe: Probe | None = None
    #: the NATS user it logs in as (``bh.devstack.auth.ROLES``), None: no bus
    nats_role: str | None = None
    #: several replicas (``bh up --brains/--hands``: ``brain-1``, ``brain-2``...)
    scales: bool = False
    #: it talks to a Docker engine (``DOCKER_HOST``)
    engine: bool = False
    #: what to scale it on (documentation; docs/deploy-kubernetes.md)
    scaling: str = ""
    #: what it needs beyond an unprivileged container, and why (documentation)
    privileges: str = "none: non-root (uid 10001), read-only root, no capabilities"

    def variable(self, name: str) -> Variable:
        found = [variable for variable in self.env if variable.name == name]
        if not found:
            raise KeyError(f"{self.name} has no variable {name}")
        return found[0]

    def port(self, name: str) -> Port:
        found = [port for port in self.ports if port.name == name]
        if not found:
            raise KeyError(f"{self.name} has no port {name}")
        return found[0]

    @property
    def secrets(self) -> frozenset[str]:
        """The secret files it reads (mounted under ``SECRETS_DIR``)."""
        return frozenset(v.secret for v in self.env if v.secret is not None)
