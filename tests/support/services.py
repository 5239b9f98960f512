"""Where the real servers for integration tests are, and what to do when one is missing.

Locally a missing server skips its tests; under ``CI=true`` it fails them, so CI can
never go green by skipping.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import NoReturn
from urllib.parse import urlsplit

import pytest

# `bh dev up`'s defaults in this checkout: its ports, and its credentials (the password
# files under .dev/secrets; the servers refuse a client without them).
_SECRETS = Path(__file__).resolve().parents[2] / ".dev" / "secrets"
DEFAULTS = {
    "BH_AWS_ENDPOINT_URL": "http://127.0.0.1:15000",
    "BH_REDIS_URL": f"redis://127.0.0.1:16379/0?passfile={_SECRETS}/redis.pass",
    "BH_NATS_URL": f"nats://operator@127.0.0.1:14222?passfile={_SECRETS}/nats-operator.pass",
    "BH_RGW_ENDPOINT_URL": "http://127.0.0.1:17480",
    "BH_RGW_CREDENTIALS_FILE": f"{_SECRETS}/rgw.credentials",
}
#: what botocore takes before a shared-credentials file (``AWS_PROFILE`` picks another)
_AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


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


def bh_dev(*args: str, env: dict[str, str], timeout_s: float = 120) -> CompletedProcess[str]:
    """``bh dev ARGS`` in ``env`` (a dev home and ports of a test's own), its output kept."""
    return subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports nothing listens on right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def require(variable: str, what: str, *, start: str = "bh dev up") -> str:
    """The URL of a real server, or skip (locally) / fail (CI) when it is not there."""
    url = url_of(variable)
    if not reachable(url):
        missing(f"{what} is not reachable at {url} (start it with `{start}`)")
    return url


def missing(message: str) -> NoReturn:
    """Skip the test locally; fail it under CI, which must have every service."""
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def aws_environment() -> None:
    """Dummy credentials for the local S3/DynamoDB API server (never real ones)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


def rgw_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give this test radosgw's keys: botocore reads the 0600 shared-credentials file
    that `bh dev up --require rgw` wrote (``BH_RGW_CREDENTIALS_FILE``), as any client
    would. The AWS keys in the environment (moto's dummy ones, from `bh dev env`) would
    take precedence over the file, so they are removed for the test."""
    path = Path(url_of("BH_RGW_CREDENTIALS_FILE"))
    if not path.is_file():
        missing(f"radosgw's credentials file {path} is missing (`bh dev up --require rgw`)")
    for name in _AWS_KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(path))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
