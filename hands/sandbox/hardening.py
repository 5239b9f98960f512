"""What a run's container is created with: every defense is a flag set on create.

The table in ``docs/hardening.md`` names each flag and the test that attacks it. A
cold run's container and a warm one (``hands.sandbox.pool``) get the same hardening
(``create_options``, ``host_config``): no network (or only the internal egress network),
read-only root, a noexec tmpfs scratch, no capabilities, no-new-privileges, uid 65534,
pids/memory(no swap)/CPU limits, an init that forwards signals, a capped ``local`` log
(raw bytes), no mounts but its session's workspace and its artifacts directory (a run
that mounts one: ``workspace_mounts``); optionally gVisor (``runsc``). The environment
is exactly the ``BH_*`` variables, the tool's ``config`` and the egress proxy's
variables; the labels say whose run of which operation it is.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import docker.types  # type: ignore[import-untyped]

from contracts import InvalidInput, PayloadTooLarge
from contracts.tool import MAX_ARGUMENT_BYTES, DispatchMode, ToolDefinition
from hands.egress.route import EgressRoute
from hands.sandbox import (
    LABEL_DEADLINE,
    LABEL_MODE,
    LABEL_OPERATION,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_SESSION,
    LABEL_TOOL,
    RunSpec,
    attempt_environment,
)
from hands.workspace.mount import ARTIFACTS_MOUNT, RunMount

LABEL_EXECUTOR = "io.brainhands.executor"
SANDBOX_USER = "65534:65534"
# Egress containers resolve nothing themselves (the proxy does). Docker < 26 forwards
# the embedded DNS of internal networks to the host's resolvers (CVE-2024-29018), from
# the host's namespace when they are loopback (127/8). The one upstream configured is
# the unspecified address: not loopback to Docker, so it is asked from the container's
# own namespace, where it means the container itself — no other host, whatever network
# the engine sits on (a "documentation" address may be a real neighbour).
_DNS_NOWHERE = "0.0.0.0"
#: The image's volumes are masked by this: empty, read-only, tiny (no anonymous volume).
_MASK = "ro,size=4k,mode=0555,noexec,nosuid,nodev"
#: the CFS period a run's CPU share is a quota of (Docker's own default: 100 ms)
_CPU_PERIOD_US = 1_000_000


def create_options(*, kill_grace: timedelta) -> dict[str, Any]:
    """What every container of ours is created with besides its image, command, name,
    environment, labels and host config."""
    return {
        "user": SANDBOX_USER,
        "stop_signal": "SIGTERM",
        "stop_timeout": max(1, round(kill_grace.total_seconds())),
        "use_config_proxy": False,
    }


def arguments(spec: RunSpec) -> str:
    """The run's arguments as the JSON its environment carries (``BH_ARGUMENTS``)."""
    encoded = json.dumps(spec.args, separators=(",", ":"), ensure_ascii=False)
    size = len(encoded.encode())
    if size > MAX_ARGUMENT_BYTES:
        raise PayloadTooLarge(
            f"arguments of operation {spec.operation_id} are {size} bytes; at most "
            f"{MAX_ARGUMENT_BYTES} fit in a sandbox's environment",
            size=size,
            limit=MAX_ARGUMENT_BYTES,
        )
    return encoded


def environment(spec: RunSpec, arguments: str, egress: EgressRoute | None) -> dict[str, str]:
    """A run's environment (a warm container gets it with its job)."""
    variables = {
        "BH_OPERATION_ID": spec.operation_id,
        "BH_ARGUMENTS": arguments,
        "BH_MODE": spec.mode.value,
        **spec.tool.config,
        **attempt_environment(spec),
        **(spec.workspace.environment() if spec.workspace is not None else {}),
    }
    if spec.tool.network.allow:
        if egress is None:
            raise InvalidInput(
                f"tool {spec.tool.ref} asks for egress to {list(spec.tool.network.allow)} "
                "but this Hands has no egress proxy configured"
            )
        variables |= egress.environment(spec.operation_id)
    return variables


def labels(spec: RunSpec, *, owner: str) -> dict[str, str]:
    """A cold run's labels: whose run of which operation, and when it is overdue."""
    deadline = spec.overdue_at()
    return {
        LABEL_OPERATION: spec.operation_id,
        LABEL_SESSION: spec.session_id,
        LABEL_MODE: spec.mode.value,
        LABEL_OWNER: owner,
        LABEL_TOOL: spec.tool.ref,
        LABEL_DEADLINE: deadline.isoformat(),
        LABEL_EXECUTOR: spec.executor,
    }


def warm_environment(tool: ToolDefinition, *, idle: timedelta) -> dict[str, str]:
    """A warm container's environment until its job brings the run's."""
    return {**tool.config, "BH_WARM_IDLE_S": str(idle.total_seconds())}


def warm_labels(tool: ToolDefinition, key: str, *, owner: str) -> dict[str, str]:
    """A warm container's labels: no operation (once bound, its name tells it)."""
    return {
        LABEL_OWNER: owner,
        LABEL_TOOL: tool.ref,
        LABEL_MODE: DispatchMode.RUN.value,
        LABEL_POOL: key,
    }


def host_config(
    api: Any,
    tool: ToolDefinition,
    volumes: list[str],
    *,
    egress: EgressRoute | None,
    cpus: float | None,
    runtime: str | None,
    workspace: RunMount | None = None,
) -> Any:
    """The container's host config: the defenses (``volumes``: the paths the image
    declares as ``VOLUME``, each masked; ``cpus``: the engine's, a cap on the share)."""
    limits, route = tool.limits, tool.network.allow and egress
    log_bytes = 2 * limits.output_bytes + 2**20  # framing, and stderr beside stdout
    shm = shared_memory_bytes(limits.scratch_bytes)
    scratch = f"size={limits.scratch_bytes - shm},mode=1777,noexec,nosuid,nodev"
    return api.create_host_config(
        network_mode=route.network if route else "none",
        dns=[_DNS_NOWHERE] if route else None,
        read_only=True,
        # a mount at a volume's path replaces the volume: none is created
        tmpfs={**{path: _MASK for path in volumes}, "/tmp": scratch},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        privileged=False,
        pids_limit=limits.pids,
        mem_limit=limits.memory_bytes,
        memswap_limit=limits.memory_bytes,
        # the share as a quota per period: Docker's 100 ms period throttles an
        # interpreter's start (0.25 CPU: 25 ms of every 100); over a 1 s period the
        # same share lets it start in one burst (docs/hardening.md, bench.warm)
        cpu_period=_CPU_PERIOD_US,
        cpu_quota=int(min(limits.cpus, cpus or limits.cpus) * _CPU_PERIOD_US),
        oom_score_adj=1000,
        ipc_mode="private",
        shm_size=shm,
        cgroupns="private",
        init=True,
        ulimits=[
            docker.types.Ulimit(name="core", soft=0, hard=0),
            docker.types.Ulimit(name="nofile", soft=1024, hard=1024),
        ],
        log_config=docker.types.LogConfig(
            # "local" keeps the bytes a tool wrote; json-file re-encodes them as JSON
            # strings, replacing bytes that are not UTF-8 (which must be refused)
            type="local",
            config={"max-size": str(log_bytes), "max-file": "2", "compress": "false"},
        ),
        restart_policy={"Name": "no"},
        runtime=runtime,
        mounts=workspace_mounts(workspace),
    )


def workspace_mounts(workspace: RunMount | None) -> list[Any]:
    """The only mounts a run gets (``docs/hardening.md``): its session's working tree at
    the tool's path, read-only for an ``ro`` tool, and its artifacts directory, both
    host directories named by the operation; none for a run that mounts no workspace.
    The Docker API sets no ``nosuid``/``nodev`` on a bind mount: their effect comes from
    no-new-privileges (a setuid file raises nothing), no capabilities (no ``mknod``) and
    the device cgroup, and a snapshot refuses such files."""
    if workspace is None:
        return []
    return [
        docker.types.Mount(
            target=workspace.path,
            source=str(workspace.tree),
            type="bind",
            read_only=not workspace.writable,
        ),
        docker.types.Mount(
            target=ARTIFACTS_MOUNT, source=str(workspace.artifacts), type="bind", read_only=False
        ),
    ]


def shared_memory_bytes(scratch_bytes: int) -> int:
    """The part of a run's scratch cap that is its ``/dev/shm`` (an eighth, at most
    8 MiB); ``/tmp`` gets the rest, so the two writable places together hold at most
    ``scratch_bytes``."""
    return min(scratch_bytes // 8, 8 * 2**20)
