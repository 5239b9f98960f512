"""The dev stack's S3 user on radosgw, and the file its keys live in.

radosgw-admin makes the user with keys it generates (so the secret is never on a command
line); the keys go into an AWS shared-credentials file (0600, under the dev home's
``secrets/``), which botocore reads when ``AWS_SHARED_CREDENTIALS_FILE`` names it. The
file is the secret's only copy outside the cluster: ``bh dev env`` exports its path.
"""

from __future__ import annotations

import configparser
import json
from dataclasses import dataclass, field
from pathlib import Path

from bh.devstack.errors import DevstackError
from bh.devstack.rgw import tools
from bh.devstack.rgw.bootstrap import admin
from bh.devstack.rgw.cluster import Cluster
from contracts import InvalidInput
from runtime.credentials import read_secret, write_secret

UID = "bh-dev"
PROFILE = "default"
_NO_SUCH_USER = 22  # radosgw-admin's exit code (EINVAL) for "no user info saved"


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str = field(repr=False)

    def render(self) -> str:
        """The shared-credentials file's text."""
        return (
            f"[{PROFILE}]\n"
            f"aws_access_key_id = {self.access_key}\n"
            f"aws_secret_access_key = {self.secret_key}\n"
        )


def ensure(cluster: Cluster, credentials: Path) -> None:
    """Make the user unless it exists, and write its keys to ``credentials`` unless the
    file already holds them (a cluster made afresh has a new user with new keys)."""
    keys = _info(cluster) or _create(cluster)
    if read(credentials) != keys:
        write_secret(credentials, keys.render())


def read(credentials: Path) -> Keys | None:
    """The keys in ``credentials``; None if the file is missing, unreadable or open to
    others (``runtime.credentials.read_secret`` refuses such a file)."""
    try:
        text = read_secret(credentials)
    except InvalidInput:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
        section = parser[PROFILE]
        return Keys(section["aws_access_key_id"], section["aws_secret_access_key"])
    except (configparser.Error, KeyError):
        return None


def _info(cluster: Cluster) -> Keys | None:
    found = tools.run(
        *admin(cluster, "radosgw-admin"), "user", "info", "--uid", UID, allowed=(0, _NO_SUCH_USER)
    )
    return _keys(found) if found.strip() else None


def _create(cluster: Cluster) -> Keys:
    made = tools.run(
        *admin(cluster, "radosgw-admin"), "user", "create", "--uid", UID, "--display-name", UID
    )
    keys = _keys(made)
    if keys is None:
        raise DevstackError(f"radosgw-admin made the S3 user {UID} without keys")
    return keys


def _keys(user_json: str) -> Keys | None:
    try:
        keys = json.loads(user_json).get("keys") or []
        return Keys(keys[0]["access_key"], keys[0]["secret_key"]) if keys else None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise DevstackError("radosgw-admin printed no user record") from None
