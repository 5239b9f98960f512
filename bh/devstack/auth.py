"""The dev stack's bus credentials: one NATS user per role, a Redis password, all in 0600
files under ``<dev home>/secrets/`` (a 0700 directory), made once and kept.

Servers read them from config files in that directory, never from their command line
(which every local user can read in ``ps``). Clients get URLs naming the user and the
password *file* (``nats://brain@127.0.0.1:14222?passfile=...``, ``runtime.credentials``),
so ``bh dev env``, logs and error messages never hold a secret.

NATS roles and what each may publish (``*`` is the namespace, so every test namespace
works; ``docs/security.md`` has the full table):

- ``brain``: dispatches and cancellations (its outbox relay);
- ``hands``: results; it consumes dispatches and hears cancellations;
- ``scheduler``: dispatches (re-issued from the store's intents); it consumes results;
- ``api``: results (``bh ops settle``) and cancellations (the Hands API); with
  ``--consume`` it consumes dispatches as a Hands does;
- ``operator``: everything (tests, ``bh`` operator commands, ``bh init``, stream repair).

Of the JetStream API each service role gets an allow list, not ``$JS.API.>`` less a deny
list (a deny list missed ``STREAM.UPDATE``, so a Hands could shrink or re-subject the
streams): the account's JetStream answer (readiness), stream info and stream create
(``bus.Bus.ensure_streams`` creates a missing stream; creating an existing one with the
same configuration changes nothing, with another is refused), and for the consuming
roles their own durable consumer's subjects. Updating, purging or deleting streams and
deleting consumers is the operator's alone.
"""

from __future__ import annotations

import fcntl
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime.credentials import PASSFILE, read_secret, write_secret

OPERATOR = "operator"
ROLES = ("brain", "hands", "scheduler", "api", OPERATOR)

_DISPATCH = "*.tools.dispatch.>"
_RESULTS = "*.tools.results.>"
_CANCEL = "*.tools.cancel"
_INBOX = "_INBOX.>"
#: the durable consumers' names (``bus.backlog``'s; not imported: ``bh`` starts without nats)
HANDS_CONSUMER = "hands"
SCHEDULER_CONSUMER = "scheduler"
# Every service role: JetStream's answer (the readiness check), the streams read and
# created when missing. (Stream names are one subject token, ``<NS>_DISPATCH``: "our
# streams in any namespace" cannot be written as a wildcard, so ``*``.)
_STREAMS = ("$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.STREAM.CREATE.*")
# Reading a backlog's oldest message (``bus.backlog``: its age).
_MESSAGE = "$JS.API.STREAM.MSG.GET.*"


def _consumer(name: str) -> tuple[str, ...]:
    """What a durable pull consumer called ``name`` needs, on any stream: its info, its
    creation (nats-py's durable create, and the named create of newer clients), fetching
    and acknowledging (``$JS.ACK.<stream>.<consumer>.…``, and the form with a domain
    and an account hash in front)."""
    api = "$JS.API.CONSUMER"
    return (
        f"{api}.INFO.*.{name}",
        f"{api}.DURABLE.CREATE.*.{name}",
        f"{api}.CREATE.*.{name}",
        f"{api}.CREATE.*.{name}.>",
        f"{api}.MSG.NEXT.*.{name}",
        f"$JS.ACK.*.{name}.>",
        f"$JS.ACK.*.*.*.{name}.>",
    )


def _backlog(name: str) -> str:
    """Reading another role's consumer (its backlog), not taking from it."""
    return f"$JS.API.CONSUMER.INFO.*.{name}"


#: role -> (may publish, may subscribe), beyond reply inboxes
PERMISSIONS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "brain": ((_DISPATCH, _CANCEL, *_STREAMS), (_RESULTS,)),
    "hands": ((_RESULTS, *_STREAMS, *_consumer(HANDS_CONSUMER), _MESSAGE), (_CANCEL,)),
    "scheduler": (
        (
            _DISPATCH,
            *_STREAMS,
            *_consumer(SCHEDULER_CONSUMER),
            _backlog(HANDS_CONSUMER),
            _MESSAGE,
        ),
        ("$JS.EVENT.ADVISORY.>",),
    ),
    "api": (
        (_RESULTS, _CANCEL, *_STREAMS, *_consumer(HANDS_CONSUMER), _MESSAGE),
        (_CANCEL,),
    ),
}


@dataclass(frozen=True)
class Secrets:
    """Where the dev stack's credentials live: ``<home>/secrets``."""

    root: Path

    @property
    def redis_passfile(self) -> Path:
        return self.root / "redis.pass"

    @property
    def redis_conf(self) -> Path:
        return self.root / "redis.conf"

    @property
    def nats_conf(self) -> Path:
        return self.root / "nats.conf"

    def nats_passfile(self, role: str) -> Path:
        return self.root / f"nats-{role}.pass"

    @property
    def rgw_credentials(self) -> Path:
        """radosgw's S3 keys, an AWS shared-credentials file (``bh.devstack.rgw.user``)."""
        return self.root / "rgw.credentials"

    def ensure(self) -> bool:
        """Make every missing password (kept ones stay) and write the servers' configs;
        whether ``nats.conf`` changed (a running nats-server must reload it: the roles'
        permissions of an older version). Locked: redis and nats are prepared
        concurrently and both call this."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)
        with (self.root / "lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            return self._ensure()

    def _ensure(self) -> bool:
        for path in (self.redis_passfile, *(self.nats_passfile(role) for role in ROLES)):
            if not path.exists():
                write_secret(path, secrets.token_urlsafe(32))
        write_secret(self.redis_conf, f"requirepass {read_secret(self.redis_passfile)}")
        wanted = nats_config(self.passwords())
        if self.nats_conf.exists() and self.nats_conf.read_text() == wanted:
            return False
        write_secret(self.nats_conf, wanted)
        return True

    def passwords(self) -> dict[str, str]:
        return {role: read_secret(self.nats_passfile(role)) for role in ROLES}

    def password(self, role: str) -> str | None:
        """The role's NATS password, or None before ``ensure`` made it."""
        path = self.nats_passfile(role)
        return read_secret(path) if path.exists() else None

    def redis_password(self) -> str | None:
        return read_secret(self.redis_passfile) if self.redis_passfile.exists() else None

    def redis_url(self, host: str, port: int) -> str:
        return f"redis://{host}:{port}/0?{PASSFILE}={self.redis_passfile}"

    def nats_url(self, host: str, port: int, role: str = OPERATOR) -> str:
        return f"nats://{role}@{host}:{port}?{PASSFILE}={self.nats_passfile(role)}"


def nats_config(passwords: Mapping[str, str]) -> str:
    """nats-server's ``authorization`` block: one user per role with its permissions.
    JSON is valid nats-server config syntax, and quotes every password safely."""
    users: list[dict[str, object]] = [{"user": OPERATOR, "password": passwords[OPERATOR]}]
    for role, (publish, subscribe) in PERMISSIONS.items():
        permissions = {
            "publish": {"allow": list(publish)},
            "subscribe": {"allow": [_INBOX, *subscribe]},
        }
        users.append({"user": role, "password": passwords[role], "permissions": permissions})
    return "authorization " + json.dumps({"users": users}, indent=2) + "\n"


# process name (or its prefix before "-<n>") -> NATS role; None: it never uses the bus
_PROCESS_ROLES: Mapping[str, str | None] = {
    "brain": "brain",
    "hands": "hands",
    "hands-api": "api",
    "scheduler": "scheduler",
    "session-api": None,
}


def role_env(env: Mapping[str, str], process: str) -> dict[str, str]:
    """``env`` for one system process (``brain-2``, ``hands-api``...): ``BH_NATS_URL``
    becomes its role's URL (``BH_NATS_URL_<ROLE>``, as ``bh dev env`` exports them) and
    the other roles' URLs are dropped. A process of unknown name, or an env without role
    URLs (a deployment's own), keeps its ``BH_NATS_URL``."""
    base = process if process in _PROCESS_ROLES else process.rpartition("-")[0]
    if base not in _PROCESS_ROLES:
        return dict(env)
    role = _PROCESS_ROLES[base]
    kept = {name: value for name, value in env.items() if not name.startswith("BH_NATS_URL_")}
    if role is None:
        kept.pop("BH_NATS_URL", None)
        return kept
    own = env.get(f"BH_NATS_URL_{role.upper()}")
    return kept if own is None else {**kept, "BH_NATS_URL": own}
