"""A deployment's secret files, made by one command:
``python -m bh.deploy_secrets DIR`` (the compose deployment: ``infra/compose/.secrets``).

Every file the service table (``bh.deploy.services``) names, and the servers' own:

=======================  ==============================================================
file                     what
=======================  ==============================================================
``redis.pass``           the Redis password; ``redis.conf``: ``requirepass`` for the server
``nats-<role>.pass``     each NATS user's password (brain, hands, scheduler, api,
                         operator); ``nats.conf``: the servers' users and permissions
                         (``bh.devstack.auth.nats_config``), the cluster's routes and
                         their credentials, JetStream
``s3-access-key``,       the object store's keys (MinIO's root user, radosgw's S3 user);
``s3-secret-key``        ``store.credentials``: the same as an AWS shared-credentials
                         file, for the services
``session-api.tokens``,  an admin token of each API (``webapi.auth``'s tokens files)
``hands-api.tokens``
``metrics.tokens``       the workers' scrape token (a read token; ``webapi.exposition``)
``hands.secret``         the key of the Hands' egress proxy tokens
``hands.credentials``    headers the egress proxy adds per destination: ``{}``, yours
=======================  ==============================================================

Idempotent: a file that exists is kept (delete it to rotate; the servers and services
read theirs at start), a missing one is made. Never in a command line, and printed only
when asked: ``python -m bh.deploy_secrets DIR --token session-api`` prints that API's
admin token, for the operator's own shell (``export BH_SESSION_API_TOKEN="$(…)"``).
Files are mode 0440, owner root, group 10001 — the services' uid and gid in the image —
from their first byte: the services running as 10001 read them as their group, those
running as root (the Hands, the Hands API, the init job) as their owner, and others on
the host cannot (``runtime.credentials`` refuses a file others may read). The directory
is 0700. Making them so needs root; otherwise the files stay yours (0600) and the
command says the containers cannot read them.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from bh.devstack.auth import ROLES, nats_config
from runtime.credentials import write_secret

#: the services' uid and gid in the image (``infra/images/service``)
SERVICE_GID: Final = 10001
NATS_NODES: Final = ("nats-1", "nats-2", "nats-3")
_ROUTE_USER: Final = "route"
#: held while files are made (empty, never mounted; private like the rest)
_LOCK: Final = ".lock"


def ensure(directory: Path) -> list[str]:
    """Make every missing file under ``directory``; the names of those made. Locked
    (``.lock`` in the directory, as ``bh.devstack.auth`` does): runs at once would each
    find a file missing and replace each other's passwords under configs already
    derived from the first ones."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(os.open(directory / _LOCK, os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure(directory)


def _ensure(directory: Path) -> list[str]:
    made = []
    for name, content in _FILES.items():
        path = directory / name
        if not path.exists():
            write_secret(path, content(directory))
            made.append(name)
    if os.geteuid() == 0:
        for path in directory.iterdir():
            os.chown(path, 0, SERVICE_GID)
            path.chmod(0o440)
        directory.chmod(0o700)
    return made


def _token() -> str:
    return secrets.token_urlsafe(32)


def _read(directory: Path, name: str) -> str:
    return (directory / name).read_text().strip()


def _tokens(directory: Path) -> str:
    return json.dumps({"tokens": [{"name": "admin", "token": _token(), "access": "admin"}]})


def _redis_conf(directory: Path) -> str:
    return f"requirepass {_read(directory, 'redis.pass')}\n"


def _store_credentials(directory: Path) -> str:
    return (
        "[default]\n"
        f"aws_access_key_id = {_read(directory, 's3-access-key')}\n"
        f"aws_secret_access_key = {_read(directory, 's3-secret-key')}\n"
    )


def _nats_conf(directory: Path) -> str:
    """JetStream, the client users, and a three-node cluster whose routes log in (each
    node routes to all three; a route to itself is ignored)."""
    route = _read(directory, "nats-route.pass")
    cluster = {
        "name": "brainhands",
        "listen": "0.0.0.0:6222",
        "authorization": {"user": _ROUTE_USER, "password": route},
        "routes": [f"nats://{_ROUTE_USER}:{route}@{node}:6222" for node in NATS_NODES],
    }
    passwords = {role: _read(directory, f"nats-{role}.pass") for role in ROLES}
    return (
        'listen: "0.0.0.0:4222"\n'
        'http: "0.0.0.0:8222"\n'
        'jetstream {"store_dir": "/data"}\n'
        f"cluster {json.dumps(cluster, indent=2)}\n" + nats_config(passwords)
    )


#: file -> how to make it from the directory (files it reads come earlier)
_FILES: Final[Mapping[str, Callable[[Path], str]]] = {
    "redis.pass": lambda _: _token(),
    **{f"nats-{role}.pass": (lambda _: _token()) for role in ROLES},
    "nats-route.pass": lambda _: _token(),
    # MinIO wants an access key of 3 to 20 characters, a secret of 8 to 40
    "s3-access-key": lambda _: f"bh{secrets.token_hex(8)}",
    "s3-secret-key": lambda _: secrets.token_urlsafe(30),
    "redis.conf": _redis_conf,
    "nats.conf": _nats_conf,
    "store.credentials": _store_credentials,
    "session-api.tokens": _tokens,
    "hands-api.tokens": _tokens,
    "metrics.tokens": lambda _: json.dumps(
        {"tokens": [{"name": "prometheus", "token": _token(), "access": "read"}]}
    ),
    "hands.secret": lambda _: secrets.token_hex(32),
    "hands.credentials": lambda _: "{}",
}


#: the APIs whose admin token ``--token`` prints
APIS: Final = ("session-api", "hands-api")


def admin_token(directory: Path, api: str) -> str:
    """The admin token in ``DIR/<api>.tokens``."""
    document = json.loads((directory / f"{api}.tokens").read_text())
    return str(next(t["token"] for t in document["tokens"] if t.get("access") == "admin"))


def main(argv: list[str]) -> int:
    usage = f"usage: python -m bh.deploy_secrets DIRECTORY [--token {'|'.join(APIS)}]"
    if len(argv) == 3 and argv[1] == "--token" and argv[2] in APIS:
        try:
            print(admin_token(Path(argv[0]), argv[2]))
        except (OSError, ValueError, KeyError, StopIteration) as error:
            print(f"{argv[0]}: no admin token of {argv[2]}: {error}", file=sys.stderr)
            return 2
        return 0
    if len(argv) != 1:
        print(usage, file=sys.stderr)
        return 2
    directory = Path(argv[0])
    made = ensure(directory)
    print(f"{directory}: {len(made)} made, {len(_FILES) - len(made)} kept")
    if os.geteuid() != 0:
        print(
            f"not root: the files stay yours (0600), and containers running as uid "
            f"{SERVICE_GID} cannot read them; run this as root",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
