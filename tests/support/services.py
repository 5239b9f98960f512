"""Where the real servers for integration tests are, and what to do when one is missing.

Locally a missing server skips its tests; under ``CI=true`` it fails them, so CI can
never go green by skipping.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# `bh dev up`'s defaults in this checkout: its ports, and its credentials (the password
# files under .dev/secrets; the servers refuse a client without them).
_SECRETS = Path(__file__).resolve().parents[2] / ".dev" / "secrets"
DEFAULTS = {
    "BH_AWS_ENDPOINT_URL": "http://127.0.0.1:15000",
    "BH_REDIS_URL": f"redis://127.0.0.1:16379/0?passfile={_SECRETS}/redis.pass",
    "BH_NATS_URL": f"nats://operator@127.0.0.1:14222?passfile={_SECRETS}/nats-operator.pass",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def url_of(variable: str) -> str:
    return os.environ.get(variable) or DEFAULTS[variable]


def reachable(url: str, timeout: float = 0.5) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout):
            return True
    except OSError:
        return False


def require(variable: str, what: str) -> str:
    """The URL of a real server, or skip (locally) / fail (CI) when it is not there."""
    url = url_of(variable)
    if not reachable(url):
        message = f"{what} is not reachable at {url} (start it with `bh dev up`)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return url


def aws_environment() -> None:
    """Dummy credentials for the local S3/DynamoDB API server (never real ones)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
