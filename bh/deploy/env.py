"""A service's environment variable, as the service table describes it.

A variable is one of four kinds (``Source``): a value fixed by the image's conventions
(a port, a path under ``/run/secrets``), the deployment's own setting (where its store,
Redis and NATS are: a ConfigMap key on Kubernetes), a file from a secret store (the
variable holds the file's *path*; the file is mounted at ``/run/secrets/<file>``), or —
only where the code reads no file — a secret value put in the environment by the
orchestrator (``secretKeyRef``). Secrets themselves are never in the table.

``local`` says how ``bh up`` (every service as a process on one host) sets the same
thing: the same name (the default), another name (a token in the environment instead
of a tokens file), or ``None`` when one host needs nothing of the kind (the probes bind
loopback; there is no object store's credentials file for SQLite).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

#: where a container finds its secret files
SECRETS_DIR: Final = "/run/secrets"
#: ``local`` for a variable set under the same name on one host
SAME: Final = "="


class Source(enum.Enum):
    FIXED = "fixed"  # the same value in every deployment
    SETTING = "setting"  # the deployment's own (not secret): value is an example
    SECRET_FILE = "secret-file"  # the path of a mounted secret file
    SECRET_VALUE = "secret-value"  # a secret in the environment (no file variant exists)


@dataclass(frozen=True)
class Variable:
    name: str
    #: the value in a container; for a SETTING an example (compose's service names)
    value: str
    source: Source = Source.FIXED
    #: the secret file the value names (a passfile in a URL, a tokens file), if any
    secret: str | None = None
    #: a SETTING's key in the deployment's ConfigMap (None: written in place), or a
    #: SECRET_VALUE's in its Secret
    key: str | None = None
    local: str | None = SAME

    @property
    def local_name(self) -> str | None:
        """The variable ``bh up`` sets for it, or None."""
        return self.name if self.local == SAME else self.local


def fixed(name: str, value: str, *, local: str | None = SAME) -> Variable:
    return Variable(name, value, local=local)


def setting(
    name: str, key: str | None, example: str, *, secret: str | None = None, local: str | None = SAME
) -> Variable:
    """The deployment's own value: a ConfigMap ``key`` on Kubernetes, or (``key`` None) a
    value each output writes as it sees fit (a tuning such as a concurrency)."""
    return Variable(name, example, Source.SETTING, secret=secret, key=key, local=local)


def secret_file(name: str, file: str, *, local: str | None) -> Variable:
    """``name`` holds the path of the secret file ``file`` under ``SECRETS_DIR``."""
    return Variable(name, f"{SECRETS_DIR}/{file}", Source.SECRET_FILE, secret=file, local=local)


def secret_value(name: str, key: str) -> Variable:
    return Variable(name, "", Source.SECRET_VALUE, key=key, local=None)
