"""The Hands service's settings: one frozen model, read from the environment only at the
entry point (``hands.__main__``, ``bh hands``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from contracts import InvalidInput
from contracts.model import Frozen
from hands.labels import ToolCaps, parse_size
from hands.sandbox import NAMESPACE
from hands.sandbox.pool import parse_sizes
from lifecycle.decision import LifecycleSettings


def new_executor_id() -> str:
    """Names one incarnation of a Hands process (an operation attempt's ``executor``)."""
    return f"hands:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class HandsSettings(Frozen):
    store_url: str
    nats_url: str
    #: the bus namespace shared with the Brains of this deployment
    namespace: str = "bh"
    executor_id: str = Field(default_factory=new_executor_id)
    #: the deployment's sandbox namespace (``BH_HANDS_OWNER``): its containers' owner
    #: label and name prefix; the reaper only touches containers carrying it. Every
    #: Hands of one deployment must share it, two deployments on one engine must not:
    #: by default it is derived from the store's location (``store_namespace``)
    owner: str = ""
    sandbox: Literal["docker", "process"] = "docker"
    docker_url: str | None = None
    runtime: str | None = None
    process_root: Path = Path(".hands/runs")
    #: where this Hands keeps its sessions' working trees, its runs' workspace and
    #: artifacts directories and its cache of workspace blobs (``BH_HANDS_WORKSPACE_CACHE``;
    #: a path the Docker engine can bind-mount: on its host)
    workspace_root: Path = Path(".hands/workspaces")
    #: the most the blob cache keeps before the least recently used go
    #: (``BH_HANDS_WORKSPACE_CACHE_SIZE``, e.g. ``2g``)
    workspace_cache_bytes: int = Field(default=2 * 2**30, ge=0)
    concurrency: int = Field(default=4, ge=1, le=256)
    ack_wait: timedelta = timedelta(seconds=30)
    #: how long a claim gives the run to start beyond the tool's timeout (pulling,
    #: creating, starting the container; ``BH_HANDS_START_ALLOWANCE``, seconds): a run
    #: not started by then has its claim renewed first (``hands.claim``)
    start_allowance: timedelta = Field(default=LifecycleSettings().start_allowance, gt=timedelta(0))
    #: deliveries of one dispatch; -1 (the default): unlimited, with backoff — running
    #: out of deliveries must never decide an operation's outcome
    max_deliver: int = Field(default=-1, ge=-1)
    reap_every: timedelta = timedelta(seconds=60)
    #: how often it writes its beat for the console's fleet page (``BH_HANDS_BEAT``)
    beat_every: timedelta = timedelta(seconds=10)
    #: HMAC key of the egress proxy's per-operation tokens: stable across restarts (a
    #: container that outlives its Hands keeps its proxy token), so by default kept in
    #: ``secret_file``, created once (mode 0600)
    secret: SecretStr | None = None
    secret_file: Path = Path.home() / ".config" / "brainhands" / "hands.secret"
    #: headers the egress proxy adds per destination (``host:port``): never in a sandbox
    credentials: dict[str, dict[str, SecretStr]] = Field(default_factory=dict)
    egress_network: str = "bh-egress"
    #: the most a tool image may declare (``BH_HANDS_MAX_*``; docs/tools.md)
    caps: ToolCaps = ToolCaps()
    #: warm containers per tool (``BH_HANDS_WARM``: ``echo=2,*=1``; ``*`` is every
    #: tool; empty: every run starts cold), at most ``concurrency`` in all
    warm: dict[str, int] = Field(default_factory=dict)
    #: ... and at most this much memory, the sum of their limits (``BH_HANDS_WARM_MEMORY``)
    warm_memory_bytes: int = Field(default=512 * 2**20, ge=0)
    #: a warm container nobody takes exits after this long (``BH_HANDS_WARM_IDLE``)
    warm_idle: timedelta = timedelta(minutes=10)

    @field_validator("warm", mode="before")
    @classmethod
    def _warm_sizes(cls, warm: Any) -> Any:
        if isinstance(warm, str):
            try:
                return parse_sizes(warm)
            except ValueError as error:
                raise ValueError(f"BH_HANDS_WARM: {error}") from None
        return warm

    @model_validator(mode="before")
    @classmethod
    def _default_owner(cls, values: Any) -> Any:
        if isinstance(values, dict) and not values.get("owner"):
            values = {**values, "owner": store_namespace(str(values.get("store_url") or ""))}
        return values

    @field_validator("owner")
    @classmethod
    def _valid_owner(cls, owner: str) -> str:
        if not NAMESPACE.fullmatch(owner):
            raise ValueError(
                "the sandbox namespace (BH_HANDS_OWNER) is 1-63 letters, digits, '.' or "
                "'-', starting with a letter or digit"
            )
        return owner

    def proxy_secret(self) -> SecretStr:
        """The configured secret, or this host's persisted one (created on first use)."""
        if self.secret is not None:
            return self.secret
        path = self.secret_file
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            draft = path.with_name(f".{path.name}.{os.getpid()}")
            descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_hex(32))
            # link, not rename: of several first starts, exactly one secret wins, whole
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
            draft.unlink()
        return SecretStr(path.read_text().strip())

    @classmethod
    def from_env(cls, **overrides: object) -> HandsSettings:
        """Settings from ``BH_*`` variables; ``overrides`` (e.g. CLI options) win."""
        env = os.environ
        values: dict[str, object] = {
            "store_url": env.get("BH_STORE_URL", ""),
            "nats_url": env.get("BH_NATS_URL", "nats://127.0.0.1:4222"),
        }
        optional = {
            "namespace": "BH_NAMESPACE",
            "owner": "BH_HANDS_OWNER",
            "sandbox": "BH_HANDS_SANDBOX",
            "docker_url": "DOCKER_HOST",
            "runtime": "BH_HANDS_RUNTIME",
            "process_root": "BH_HANDS_PROCESS_ROOT",
            "workspace_root": "BH_HANDS_WORKSPACE_CACHE",
            "concurrency": "BH_HANDS_CONCURRENCY",
            "secret": "BH_HANDS_SECRET",
            "secret_file": "BH_HANDS_SECRET_FILE",
            "egress_network": "BH_HANDS_EGRESS_NETWORK",
        }
        for field, variable in optional.items():
            if env.get(variable):
                values[field] = env[variable]
        timings = {
            "ack_wait": "BH_HANDS_ACK_WAIT",
            "start_allowance": "BH_HANDS_START_ALLOWANCE",
            "reap_every": "BH_HANDS_REAP",
            "beat_every": "BH_HANDS_BEAT",
            "warm_idle": "BH_HANDS_WARM_IDLE",
        }
        for field, variable in timings.items():
            if env.get(variable):
                values[field] = timedelta(seconds=float(env[variable]))
        if env.get("BH_HANDS_WARM") is not None:
            values["warm"] = env["BH_HANDS_WARM"]
        if env.get("BH_HANDS_WARM_MEMORY"):
            values["warm_memory_bytes"] = parse_size(env["BH_HANDS_WARM_MEMORY"])
        if env.get("BH_HANDS_WORKSPACE_CACHE_SIZE"):
            values["workspace_cache_bytes"] = parse_size(env["BH_HANDS_WORKSPACE_CACHE_SIZE"])
        if env.get("BH_HANDS_MAX_DELIVER"):
            values["max_deliver"] = env["BH_HANDS_MAX_DELIVER"]
        if env.get("BH_HANDS_ID"):
            values["executor_id"] = env["BH_HANDS_ID"]
        caps = {field: env[variable] for field, variable in _CAPS.items() if env.get(variable)}
        if caps:
            values["caps"] = _caps(caps)
        if env.get("BH_HANDS_CREDENTIALS"):
            values["credentials"] = _credentials(Path(env["BH_HANDS_CREDENTIALS"]))
        values.update({k: v for k, v in overrides.items() if v is not None})
        if not values["store_url"]:
            raise InvalidInput("the Hands need a store: set BH_STORE_URL or --store")
        return cls.model_validate(values)


_CAPS = {
    "cpus": "BH_HANDS_MAX_CPUS",
    "memory_bytes": "BH_HANDS_MAX_MEMORY",
    "pids": "BH_HANDS_MAX_PIDS",
    "scratch_bytes": "BH_HANDS_MAX_SCRATCH",
    "output_bytes": "BH_HANDS_MAX_OUTPUT",
    "timeout_s": "BH_HANDS_MAX_TIMEOUT",
}


def _caps(values: dict[str, str]) -> ToolCaps:
    """Caps from the environment; sizes take the labels' suffixes (``4g``)."""
    try:
        parsed = {
            field: parse_size(value) if field.endswith("_bytes") else float(value)
            for field, value in values.items()
        }
    except ValueError as error:
        raise InvalidInput(f"a BH_HANDS_MAX_* setting is invalid: {error}") from None
    return ToolCaps.model_validate(parsed)


def store_namespace(store_url: str) -> str:
    """A deployment's default sandbox namespace: ``store-`` and a hash of where its store
    is (scheme, host, port, path and parameters; credentials left out; a SQLite path
    normalised as the store opens it), so Hands sharing a store share it and deployments
    with stores of their own never collide on one Docker engine."""
    parts = urlsplit(store_url)
    path = parts.path
    if parts.scheme == "sqlite":
        path = os.path.normpath("/" + path.lstrip("/"))
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    place = f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}{path}?{query}"
    return f"store-{hashlib.sha256(place.encode()).hexdigest()[:10]}"


def _credentials(path: Path) -> dict[str, dict[str, SecretStr]]:
    """``{"host:port": {"Header": "value"}}`` from a file only root should read."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InvalidInput(f"cannot read the credentials file {path}: {error}") from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"{path} must hold an object of destination -> headers")
    return {
        str(destination): {str(k): SecretStr(str(v)) for k, v in headers.items()}
        for destination, headers in raw.items()
        if isinstance(headers, dict)
    }
