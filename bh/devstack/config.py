"""Dev stack settings, read from the environment once at the CLI entry point."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bh.devstack.errors import DevstackError

LOOPBACK = "127.0.0.1"
DOCKER_SOCKET = Path("/var/run/docker.sock")

# The checkout root holds pyproject.toml two levels above this package (bh/devstack).
_CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class Ports:
    """Loopback TCP ports of the dev services; each overridable by an env var."""

    redis: int = 16379
    nats: int = 14222
    nats_http: int = 18222
    moto: int = 15000
    rgw: int = 17480  # radosgw's S3 endpoint
    ceph_mon: int = 13300  # the Ceph monitor radosgw and its OSD talk to


PORT_VARS: Mapping[str, str] = {
    "redis": "BH_DEV_REDIS_PORT",
    "nats": "BH_DEV_NATS_PORT",
    "nats_http": "BH_DEV_NATS_HTTP_PORT",
    "moto": "BH_DEV_MOTO_PORT",
    "rgw": "BH_DEV_RGW_PORT",
    "ceph_mon": "BH_DEV_CEPH_MON_PORT",
}


@dataclass(frozen=True, kw_only=True)
class DevConfig:
    """Where the dev stack keeps its state and which ports it uses."""

    home: Path
    ports: Ports
    host: str = LOOPBACK
    docker_socket: Path = DOCKER_SOCKET

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, checkout: Path = _CHECKOUT) -> DevConfig:
        """Read ``BH_DEV_HOME`` and the ``BH_DEV_*_PORT`` variables; defaults for the rest."""
        ports = Ports(
            **{field: _port(environ, var) for field, var in PORT_VARS.items() if var in environ}
        )
        _check_distinct(ports)
        return cls(home=_home(environ, checkout), ports=ports)


def _port(environ: Mapping[str, str], var: str) -> int:
    raw = environ[var]
    try:
        port = int(raw)
    except ValueError:
        raise DevstackError(f"{var}={raw!r} is not a port number (want 1-65535)") from None
    if not 1 <= port <= 65535:
        raise DevstackError(f"{var}={port} is out of range (want 1-65535)")
    return port


def _check_distinct(ports: Ports) -> None:
    by_port: dict[int, list[str]] = {}
    for field, var in PORT_VARS.items():
        by_port.setdefault(getattr(ports, field), []).append(var)
    clashes = [" and ".join(names) for names in by_port.values() if len(names) > 1]
    if clashes:
        raise DevstackError(f"ports must differ, but {'; '.join(clashes)} share a port")


def _home(environ: Mapping[str, str], checkout: Path) -> Path:
    if environ.get("BH_DEV_HOME"):
        return Path(environ["BH_DEV_HOME"]).expanduser().absolute()
    if _is_checkout(checkout):
        return checkout / ".dev"
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "brainhands" / "dev"


def _is_checkout(root: Path) -> bool:
    """True when ``root`` is a brainhands source checkout (not site-packages)."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return bool(project.get("name") == "brainhands")
