"""Credentials named by a service URL: the user in the URL, the password in a file.

``redis://127.0.0.1:16379/0?passfile=/home/me/.dev/secrets/redis.pass`` and
``nats://brain@127.0.0.1:14222?passfile=/home/me/.dev/secrets/nats-brain.pass`` name the
file that holds the password (like libpq's ``passfile``), never the password itself. So
such a URL may be exported by ``bh dev env``, passed in the environment, shown in an
error or written to a log without giving the secret away. The file must be a regular
file nobody but its owner (and, at most, its group) can read: mode 0600, 0400 or 0440.

A password written into the URL itself (``redis://:secret@host``) is still accepted, for
deployments whose secret store hands out URLs; ``redact`` hides it wherever a URL is shown.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from contracts import InvalidInput

PASSFILE = "passfile"


@dataclass(frozen=True)
class Endpoint:
    """A server's URL without any credential in it, and the credentials apart."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def has_credentials(self) -> bool:
        return self.username is not None or self.password is not None


def endpoint(url: str) -> Endpoint:
    """Split ``url`` into a credential-free URL, the user and the password (read from the
    ``passfile`` the URL names, else from the URL itself)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    passfiles = [value for name, value in query if name == PASSFILE]
    rest = [(name, value) for name, value in query if name != PASSFILE]
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"  # an IPv6 literal
    if parts.port is not None:
        netloc += f":{parts.port}"
    bare = urlunsplit((parts.scheme, netloc, parts.path, urlencode(rest), parts.fragment))
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if passfiles:
        password = read_secret(Path(passfiles[-1]))
    return Endpoint(url=bare, username=username, password=password)


def check_private(path: Path, mode: int, what: str) -> None:
    """Refuse a secret file others may read or change. Its group may read it: Kubernetes
    mounts a Secret for a non-root pod (``fsGroup``) as 0440 whatever mode was asked for."""
    if mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP | stat.S_IXOTH):
        raise InvalidInput(
            f"the {what} {path} has mode {stat.S_IMODE(mode):04o}: others may read or "
            "change it (want 0600, 0400 or 0440)"
        )


def read_secret(path: Path) -> str:
    """The secret in ``path`` (surrounding whitespace dropped), refusing a file others can
    read: a secret that leaked to every local user is not one."""
    try:
        info = path.stat()
        text = path.read_text()
    except OSError as error:
        raise InvalidInput(f"cannot read the password file {path}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidInput(f"the password file {path} is not a regular file")
    check_private(path, info.st_mode, "password file")
    secret = text.strip()
    if not secret:
        raise InvalidInput(f"the password file {path} is empty")
    return secret


def redact(url: str) -> str:
    """``url`` fit to show: a password written into it is replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def write_secret(path: Path, secret: str) -> None:
    """Create ``path`` holding ``secret`` with mode 0600 from its first byte (never a
    moment readable by others), replacing any older file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(descriptor, "w") as file:
        file.write(secret if secret.endswith("\n") else secret + "\n")
    tmp.replace(path)
