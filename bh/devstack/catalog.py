"""The dev services: Redis, NATS JetStream, moto (S3 + DynamoDB APIs), Docker and radosgw
(Ceph's S3 server; ``bh.devstack.rgw``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta

from bh.devstack import binaries, docker_engine, probe
from bh.devstack.auth import OPERATOR, PERMISSIONS, Secrets
from bh.devstack.config import DevConfig
from bh.devstack.process import Argv, PidRecord, reload
from bh.devstack.rgw import gateway
from bh.devstack.service import Service
from bh.devstack.state import StateDir

# moto accepts any credentials; these are the names its docs use, not secrets.
AWS_EXPORTS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def services(config: DevConfig, state: StateDir, say: Callable[[str], None]) -> tuple[Service, ...]:
    """All dev services, in the order tables list them (they start concurrently)."""
    return (
        redis(config, state),
        nats(config, state),
        moto(config, state),
        docker_engine.service(config, state, say),
        gateway.service(config, state, say),
    )


def redis(config: DevConfig, state: StateDir) -> Service:
    """redis-server with ``requirepass`` from a 0600 config file: a client without the
    password is refused. An older server without a password does not count as ready, so
    ``up`` replaces it."""
    host, port = config.host, config.ports.redis
    secrets = Secrets(state.secrets)

    def launches() -> tuple[Argv, ...]:
        conf = (str(secrets.redis_conf),)  # the password, off the command line
        listen = ("--bind", host, "--port", str(port))
        no_persistence = ("--save", "", "--appendonly", "no")
        foreground = ("--dir", str(state.data("redis")), "--daemonize", "no")
        return ((str(binaries.redis_server()), *conf, *listen, *no_persistence, *foreground),)

    return Service(
        name="redis",
        address=f"redis://{host}:{port}/0",
        ports=(port,),
        launches=launches,
        ready=lambda: probe.redis_pong(host, port, password=secrets.redis_password()),
        prepare=secrets.ensure,
        exports={"BH_REDIS_URL": secrets.redis_url(host, port)},
        log_path=state.log("redis"),
        pid_path=state.pidfile("redis"),
        ready_timeout=timedelta(seconds=10),
    )


def nats(config: DevConfig, state: StateDir) -> Service:
    """nats-server with one user per role (``bh.devstack.auth``) from a 0600 config file.
    ``BH_NATS_URL`` is the operator's (tests and operator commands need every right);
    ``BH_NATS_URL_<ROLE>`` are what ``bh up`` and the demo give each service."""
    host, port, http_port = config.host, config.ports.nats, config.ports.nats_http
    secrets = Secrets(state.secrets)

    def launches() -> tuple[Argv, ...]:
        conf = ("-c", str(secrets.nats_conf))  # users and passwords, off the command line
        listen = ("-a", host, "-p", str(port), "-m", str(http_port))
        jetstream = ("-js", "--store_dir", str(state.data("nats")))
        return ((str(binaries.nats_server()), *conf, *listen, *jetstream),)

    def ready() -> bool:
        jetstream = probe.http_status(host, http_port, "/healthz?js-enabled-only=true") == 200
        password = secrets.password(OPERATOR)
        return jetstream and probe.nats_login(host, port, user=OPERATOR, password=password)

    def refresh(record: PidRecord) -> str:
        """An older version's permissions in a running server: write ours, reload."""
        if secrets.ensure() and reload(record):
            return "reloaded its users and permissions"
        return ""

    roles = {
        f"BH_NATS_URL_{role.upper()}": secrets.nats_url(host, port, role) for role in PERMISSIONS
    }
    return Service(
        name="nats",
        address=f"nats://{host}:{port}",
        ports=(port, http_port),
        launches=launches,
        ready=ready,
        prepare=secrets.ensure,
        refresh=refresh,
        exports={"BH_NATS_URL": secrets.nats_url(host, port), **roles},
        log_path=state.log("nats"),
        pid_path=state.pidfile("nats"),
        ready_timeout=timedelta(seconds=15),
    )


def moto(config: DevConfig, state: StateDir) -> Service:
    """moto_server: S3 and DynamoDB (and more) in one process, all state in memory."""
    host, port = config.host, config.ports.moto

    def launches() -> tuple[Argv, ...]:
        binaries.require_module("moto")
        return ((sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)),)

    return Service(
        name="moto",
        address=f"http://{host}:{port}",
        ports=(port,),
        launches=launches,
        ready=lambda: probe.http_status(host, port, "/moto-api/") == 200,
        exports={"BH_AWS_ENDPOINT_URL": f"http://{host}:{port}", **AWS_EXPORTS},
        log_path=state.log("moto"),
        pid_path=state.pidfile("moto"),
        ready_timeout=timedelta(seconds=30),
    )
