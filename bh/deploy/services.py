"""The service table: every deployable service of brainhands, described once.

``bh up`` (processes on one host), the compose deployment (``infra/compose/``) and the
Kubernetes manifests (``infra/k8s/``) are three outputs of this table;
``tests/unit/test_service_table.py`` fails when one of them disagrees with it about the
services, their environment variable names, ports or probes. Change a service here
first, then in each output.

Conventions every output follows:

- One image (``brainhands/service``), entry point ``bh``: ``command`` is its arguments.
- Secrets are files under ``/run/secrets`` named by ``secret`` (a ``passfile`` in the
  Redis and NATS URLs, a tokens file, the Hands' secret); the only secret value in an
  environment is the model's API key, which the model client reads from nowhere else.
- Each NATS user is the service's role (``bh.devstack.auth.ROLES``, docs/security.md).
- Workers serve ``/livez`` and ``/readyz`` on ``BH_PROBE_PORT`` (8081 in a container;
  ``bh up`` gives each process its own port), the APIs on their API port; the workers'
  ``/metrics`` are beside their probes, behind the scrape token (``metrics.tokens``).
"""

from __future__ import annotations

from typing import Final

from bh.deploy.env import Variable, fixed, secret_file, secret_value, setting
from bh.deploy.service import Kind, Port, Probe, Service

PROBE_PORT: Final = 8081
SESSION_API_PORT: Final = 8460
HANDS_API_PORT: Final = 8470
#: where a container's Docker engine socket is (the Hands' engine: docs/deploy-kubernetes.md)
ENGINE_SOCKET: Final = "unix:///run/engine/docker.sock"
#: the tools the init job registers (``bh init``, ``bh.declared_tools``): a file the
#: deployment mounts
TOOLS_FILE: Final = "/etc/brainhands/tools.json"

STORE = (
    setting("BH_STORE_URL", "store-url", "s3://brainhands?endpoint_url=http://s3:9000"),
    # S3/MinIO/radosgw keys (AWS shared-credentials format); SQLite on one host has none
    secret_file("AWS_SHARED_CREDENTIALS_FILE", "store.credentials", local=None),
    setting("BH_NAMESPACE", "namespace", "bh"),
)
REDIS = setting(
    "BH_REDIS_URL",
    "redis-url",
    "redis://redis:6379/0?passfile=/run/secrets/redis.pass",
    secret="redis.pass",
)
#: readiness failing this long ends the process (exit 3) so its supervisor starts a fresh
#: one (webapi.probes); bh up sets 0 (never): nothing there would restart it
UNREADY_LIMIT = setting("BH_UNREADY_LIMIT_S", None, "90", local=None)
PROBE_HOST = fixed("BH_PROBE_HOST", "0.0.0.0", local=None)  # bh up: loopback
#: the scrape token of the workers' /metrics, beside their probes (webapi.exposition)
METRICS = secret_file("BH_METRICS_TOKENS_FILE", "metrics.tokens", local="BH_METRICS_TOKEN")
PROBES = (fixed("BH_PROBE_PORT", str(PROBE_PORT)), PROBE_HOST, METRICS, UNREADY_LIMIT)
#: the Hands' probes: in the host's network namespace under compose, where the port is
#: the deployment's setting (BH_HANDS_PROBE_PORT there); 8081 in a pod of their own
HOST_PROBES = (setting("BH_PROBE_PORT", None, str(PROBE_PORT)), PROBE_HOST, METRICS, UNREADY_LIMIT)
MODEL = (
    # bh up sets these only for an example (its scripted model server)
    setting("BH_MODEL_BASE_URL", "model-base-url", "http://model:8000/v1", local=None),
    setting("BH_MODEL_NAME", "model-name", "default", local=None),
    secret_value("BH_MODEL_API_KEY", "model-api-key"),
)
#: the user's own agent code in the Brains' image (bh images build --services --plugin;
#: docs/deploy-own-agent.md): which plugins to load and which tools to run on the Hands,
#: whitespace-separated; bh up passes them as options
PLUGINS = (
    setting("BH_BRAIN_PLUGINS", "brain-plugins", "", local=None),
    setting("BH_BRAIN_SANDBOXED", "brain-sandboxed", "", local=None),
)
ENGINE = (
    fixed("BH_HANDS_SANDBOX", "docker"),
    fixed("DOCKER_HOST", ENGINE_SOCKET, local=None),  # bh up: the host's engine
    secret_file("BH_HANDS_SECRET_FILE", "hands.secret", local="BH_HANDS_SECRET"),
    # the sandboxes' network for granted egress: two deployments on one engine need two
    setting("BH_HANDS_EGRESS_NETWORK", None, "bh-egress", local=None),
)


def nats(role: str) -> Variable:
    """``BH_NATS_URL`` as the NATS user ``role``, its password in ``nats-<role>.pass``."""
    file = f"nats-{role}.pass"
    example = f"nats://{role}@nats:4222?passfile=/run/secrets/{file}"
    return setting("BH_NATS_URL", f"nats-url-{role}", example, secret=file)


def probe_port() -> Port:
    return Port("probe", PROBE_PORT, "BH_PROBE_PORT")


ENGINE_PRIVILEGES = (
    "a Docker engine of its own (tool runs are containers; docs/deploy-kubernetes.md: a "
    "Docker-in-Docker sidecar, privileged) and, in its own container, root with "
    "NET_ADMIN and NET_RAW in the engine's network namespace: the egress proxy binds "
    "the sandbox network's gateway address and installs the bridge firewall with "
    "iptables (docs/hardening.md)"
)

SERVICES: Final = (
    Service(
        name="init",
        kind=Kind.JOB,
        command=("init",),
        module=(),
        env=(
            *STORE,
            nats("operator"),
            # the streams' copies: 3 on a three-node JetStream cluster (services keep them)
            setting("BH_NATS_REPLICAS", "nats-replicas", "3", local=None),
            fixed("BH_INIT_TOOLS", TOOLS_FILE, local=None),
            fixed("DOCKER_HOST", ENGINE_SOCKET, local=None),
        ),
        nats_role="operator",
        engine=True,
        scaling="runs once per deployment and upgrade; every other service waits for it",
        privileges=(
            "reads the declared tool images' labels from a Docker engine (registration); "
            "makes the store's bucket or table and the streams (the NATS operator user)"
        ),
    ),
    Service(
        name="scheduler",
        kind=Kind.WORKER,
        command=("scheduler",),
        module=("scheduler",),
        env=(*STORE, REDIS, nats("scheduler"), *PROBES),
        ports=(probe_port(),),
        probe=Probe("probe"),
        nats_role="scheduler",
        scaling="2 replicas for availability; not on load (its work is shared through "
        "the durable results consumer and the store)",
    ),
    Service(
        name="session-api",
        kind=Kind.API,
        command=("session-api",),
        module=("session_api",),
        env=(
            *STORE,
            REDIS,
            secret_file(
                "BH_SESSION_API_TOKENS_FILE", "session-api.tokens", local="BH_SESSION_API_TOKEN"
            ),
            fixed("BH_SESSION_API_HOST", "0.0.0.0", local=None),
            fixed("BH_SESSION_API_PORT", str(SESSION_API_PORT), local=None),  # bh up: --port
            UNREADY_LIMIT,
        ),
        ports=(Port("api", SESSION_API_PORT, "BH_SESSION_API_PORT"),),
        probe=Probe("api"),
        scaling="request rate and open event streams (CPU); stateless; its /metrics feed "
        "the Brains' autoscaler",
    ),
    Service(
        name="hands-api",
        kind=Kind.API,
        command=("hands-api",),
        module=("hands.api_server",),
        env=(
            *STORE,
            nats("api"),
            *ENGINE,
            secret_file("BH_HANDS_API_TOKENS_FILE", "hands-api.tokens", local="BH_HANDS_API_TOKEN"),
            fixed("BH_HANDS_API_HOST", "0.0.0.0", local=None),
            # a port of the host's network under compose (a setting there); bh up: --port
            setting("BH_HANDS_API_PORT", None, str(HANDS_API_PORT), local=None),
            UNREADY_LIMIT,
        ),
        ports=(Port("api", HANDS_API_PORT, "BH_HANDS_API_PORT"),),
        probe=Probe("api"),
        nats_role="api",
        engine=True,
        scaling="request rate (CPU); 2 replicas for availability; its /metrics feed the "
        "Hands' autoscaler",
        privileges=ENGINE_PRIVILEGES + " (it registers tools, verifies and cancels runs)",
    ),
    Service(
        name="brain",
        kind=Kind.WORKER,
        command=("brain",),
        module=("brain", "worker"),
        env=(*STORE, REDIS, nats("brain"), *PROBES, *MODEL, *PLUGINS),
        ports=(probe_port(),),
        probe=Probe("probe"),
        nats_role="brain",
        scales=True,
        scaling="wake backlog on the routes Brains serve and the oldest wake's age (the "
        "Session API's /metrics); sessions driven per Brain (--concurrency, 8)",
    ),
    Service(
        name="hands",
        kind=Kind.WORKER,
        command=("hands",),
        module=("hands",),
        env=(
            *STORE,
            nats("hands"),
            *ENGINE,
            secret_file("BH_HANDS_CREDENTIALS", "hands.credentials", local=None),
            # operations at once; the autoscaler's target per Hands is the same number
            setting("BH_HANDS_CONCURRENCY", None, "4", local=None),
            *HOST_PROBES,
        ),
        ports=(probe_port(),),
        probe=Probe("probe"),
        nats_role="hands",
        scales=True,
        engine=True,
        scaling="dispatch backlog (pending + in flight on the shared consumer) per "
        "BH_HANDS_CONCURRENCY slots, and its age",
        privileges=ENGINE_PRIVILEGES,
    ),
)


def service(name: str) -> Service:
    """The table's service ``name``."""
    for found in SERVICES:
        if found.name == name:
            return found
    raise KeyError(f"no service {name!r} (known: {[s.name for s in SERVICES]})")
