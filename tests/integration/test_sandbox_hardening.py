"""One test per sandbox defense, each watched failing from the inside: the ``misbehave``
tool attacks its own container and the test asserts the sandbox held (the table in
``docs/hardening.md`` names the test of each defense).

The egress tests run the real setup — internal network, proxy on its gateway, host
firewall — so they need root and iptables, like the Hands itself."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest
from pydantic import SecretStr

from contracts.tool import NetworkPolicy, Termination, ToolDefinition
from hands.egress import EgressGateway
from hands.egress.network import bridge_gateway
from hands.images import tool_tag
from hands.labels import definition_from_labels
from hands.sandbox import RunOutcome, RunSpec
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig, shared_memory_bytes
from tests.support.images import tool_images
from tests.support.services import in_ci

pytestmark = pytest.mark.docker

MISBEHAVE = tool_tag("misbehave")
INJECTED = "Bearer not-for-the-container"
SECRET = SecretStr("hardening-test-secret")
#: What a sandbox's environment may hold besides the tool's config.
EXPECTED_ENVIRONMENT = {
    "BH_OPERATION_ID",
    "BH_ARGUMENTS",
    "BH_MODE",
    "PATH",
    "HOSTNAME",
    "HOME",
    "LANG",
    "PYTHONDONTWRITEBYTECODE",
}
PROXY_ENVIRONMENT = {
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
}


@pytest.fixture(scope="session")
def misbehave() -> ToolDefinition:
    image_id = tool_images()[MISBEHAVE]
    client = docker.APIClient(timeout=60)
    try:
        labels = client.inspect_image(image_id)["Config"]["Labels"]
    finally:
        client.close()
    return definition_from_labels(MISBEHAVE, image_id, labels, config={"MAIL_FROM": "bot@example"})


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.APIClient(timeout=120)
    yield client
    client.close()


@pytest.fixture
async def sandbox() -> AsyncIterator[DockerSandbox]:
    async with _sandbox(None) as box:
        yield box


class _sandbox:
    def __init__(self, egress: EgressGateway | None) -> None:
        config = DockerSandboxConfig(
            owner=f"test-{uuid.uuid4().hex[:10]}",
            kill_grace=timedelta(seconds=1),
            egress=egress.route if egress else None,
        )
        self.box = DockerSandbox(config)

    async def __aenter__(self) -> DockerSandbox:
        await self.box.check()
        return self.box

    async def __aexit__(self, *exc: object) -> None:
        for run in await self.box.owned():
            await self.box.kill(run.operation_id, run.mode)
        await self.box.close()


@dataclass
class Listener:
    """A host service: a TCP server that counts connections (HTTP when ``http``),
    remembering the headers of each request."""

    host: str
    http: bool = False
    port: int = 0
    connections: int = 0
    requests: list[dict[str, str]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.http:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            self.requests.append(dict(line.split(": ", 1) for line in head[1:] if line))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()


@pytest.fixture
async def host_service() -> AsyncIterator[Listener]:
    """Bound to 0.0.0.0: every host address, including the Docker bridges'."""
    listener = Listener("0.0.0.0")
    async with await _serve(listener):
        yield listener


async def _serve(listener: Listener) -> asyncio.Server:
    server = await asyncio.start_server(listener.handle, listener.host, 0)
    listener.port = server.sockets[0].getsockname()[1]
    return server


def spec_of(tool: ToolDefinition, **args: Any) -> RunSpec:
    return RunSpec(
        operation_id=f"h-{uuid.uuid4().hex[:12]}", session_id="s-h", tool=tool, args=args
    )


def report(outcome: RunOutcome) -> dict[str, Any]:
    assert outcome.termination is Termination.EXITED, outcome
    assert isinstance(outcome.output, dict), outcome
    return outcome.output


def docker_bridge_gateway(engine: Any) -> str:
    """The host's address on Docker's default bridge, found as the product finds it."""
    return bridge_gateway(engine.inspect_network("bridge"))


# -- no network ----------------------------------------------------------------------------


async def test_no_network_reaches_nothing(
    sandbox: DockerSandbox, misbehave: ToolDefinition, host_service: Listener, engine: Any
) -> None:
    targets = [
        f"127.0.0.1:{host_service.port}",
        f"{docker_bridge_gateway(engine)}:{host_service.port}",
        "169.254.169.254:80",
    ]
    outcome = await sandbox.run(spec_of(misbehave, action="connect", targets=targets, timeout=1))

    results = report(outcome)["results"]
    assert all(results[target] != "ok" for target in targets), results
    assert host_service.connections == 0


# -- allowlisted egress --------------------------------------------------------------------


@dataclass
class Egress:
    gateway: EgressGateway
    sandbox: DockerSandbox
    allowed: Listener
    policy: dict[str, tuple[str, ...]]

    async def run(self, tool: ToolDefinition, **args: Any) -> dict[str, Any]:
        spec = spec_of(tool, **args)
        self.policy[spec.operation_id] = tool.network.allow
        outcome = await self.sandbox.run(spec)
        assert INJECTED not in outcome.model_dump_json()
        return report(outcome)


@pytest.fixture
async def egress(misbehave: ToolDefinition) -> AsyncIterator[Egress]:
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        message = "the egress firewall needs root and iptables"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    allowed = Listener("127.0.0.1", http=True)  # the proxy reaches it; containers cannot
    policy: dict[str, tuple[str, ...]] = {}

    async def resolve(operation_id: str) -> tuple[str, ...]:
        return policy.get(operation_id, ())

    async with await _serve(allowed):
        destination = f"127.0.0.1:{allowed.port}"
        gateway = EgressGateway(
            docker_url="unix:///var/run/docker.sock",
            secret=SECRET,
            policy=resolve,
            credentials={destination: {"Authorization": SecretStr(INJECTED)}},
            network=f"bh-egress-test-{uuid.uuid4().hex[:8]}",
        )
        await gateway.start()
        try:
            async with _sandbox(gateway) as box:
                yield Egress(gateway, box, allowed, policy)
        finally:
            await gateway.close(teardown=True)


def allowing(tool: ToolDefinition, *destinations: str) -> ToolDefinition:
    return tool.model_copy(update={"network": NetworkPolicy(allow=destinations)})


@pytest.mark.slow
async def test_egress_reaches_the_allowed_destination_only_through_the_proxy(
    egress: Egress, misbehave: ToolDefinition, host_service: Listener, engine: Any
) -> None:
    allowed = f"127.0.0.1:{egress.allowed.port}"
    tool = allowing(misbehave, allowed)
    gateway_ip, proxy_port = egress.gateway.proxy.address

    through_proxy = await egress.run(tool, action="proxy_get", url=f"http://{allowed}/mail")
    other_port = await egress.run(
        tool, action="proxy_get", url=f"http://127.0.0.1:{host_service.port}/"
    )
    metadata = await egress.run(tool, action="proxy_get", url="http://169.254.169.254/latest/")
    direct = await egress.run(
        tool,
        action="connect",
        timeout=1,
        targets=[
            f"{gateway_ip}:{proxy_port}",  # the proxy: the one thing reachable
            allowed,  # bypassing the proxy: the container's own loopback
            f"{gateway_ip}:{host_service.port}",  # a host service on 0.0.0.0
            f"{docker_bridge_gateway(engine)}:{host_service.port}",  # another host address
            "169.254.169.254:80",
        ],
    )

    assert through_proxy["status"] == 200
    assert egress.allowed.requests[0]["Authorization"] == INJECTED  # added by the proxy
    assert other_port["status"] == 403 and metadata["status"] == 403
    results = direct["results"]
    assert results.pop(f"{gateway_ip}:{proxy_port}") == "ok"
    assert all(result != "ok" for result in results.values()), results
    assert host_service.connections == 0 and egress.allowed.connections == 1


async def test_egress_environment_names_the_proxy_and_holds_no_credentials(
    egress: Egress, misbehave: ToolDefinition
) -> None:
    tool = allowing(misbehave, f"127.0.0.1:{egress.allowed.port}")

    seen = await egress.run(tool, action="whoami")

    assert set(seen["environment"]) == EXPECTED_ENVIRONMENT | PROXY_ENVIRONMENT | {"MAIL_FROM"}


async def test_a_forged_proxy_token_is_refused(egress: Egress, misbehave: ToolDefinition) -> None:
    allowed = f"127.0.0.1:{egress.allowed.port}"
    tool = allowing(misbehave, allowed)
    host, port = egress.gateway.proxy.address
    forged = f"http://op:{'0' * 64}@{host}:{port}"
    code = (
        "import json, urllib.request, urllib.error\n"
        f"handler = urllib.request.ProxyHandler({{'http': {forged!r}}})\n"
        "opener = urllib.request.build_opener(handler)\n"
        f"try: status = opener.open('http://{allowed}/', timeout=5).status\n"
        "except urllib.error.HTTPError as error: status = error.code\n"
        "print(json.dumps({'status': status}))\n"
    )
    probe = tool.model_copy(update={"command": ("python3", "-c", code)})

    assert (await egress.run(probe))["status"] == 407
    assert egress.allowed.connections == 0


# -- the container itself ------------------------------------------------------------------


async def test_fork_bomb_is_contained_by_the_pids_limit(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    seen = report(await sandbox.run(spec_of(misbehave, action="fork_bomb")))

    assert seen["forked"] < misbehave.limits.pids
    assert "Resource temporarily unavailable" in seen["error"]


async def test_memory_hog_is_oom_killed(sandbox: DockerSandbox, misbehave: ToolDefinition) -> None:
    outcome = await sandbox.run(spec_of(misbehave, action="hog_memory"))

    assert outcome.termination is Termination.OOM_KILLED
    assert "holding" in outcome.log_tail


async def test_the_root_filesystem_is_read_only(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    paths = report(await sandbox.run(spec_of(misbehave, action="write_root")))["paths"]

    for path in ("/opt/bh/owned", "/etc/owned", "/owned"):
        assert not paths[path]["created"] and "Read-only file system" in paths[path]["error"]
    assert paths["/tmp/owned"]["created"]  # the scratch space is the one writable place


async def test_disk_fill_stops_at_the_scratch_cap(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    seen = report(await sandbox.run(spec_of(misbehave, action="fill_disk")))

    assert 0 < seen["written_bytes"] <= misbehave.limits.scratch_bytes
    assert "No space left on device" in seen["error"]


async def test_scratch_is_not_executable(sandbox: DockerSandbox, misbehave: ToolDefinition) -> None:
    code = (
        "import json, os, subprocess\n"
        "open('/tmp/run.sh', 'w').write('#!/bin/sh\\necho ran\\n')\n"
        "os.chmod('/tmp/run.sh', 0o755)\n"
        "try: subprocess.run(['/tmp/run.sh'], check=True); result = 'ran'\n"
        "except OSError as error: result = type(error).__name__\n"
        "print(json.dumps({'result': result}))\n"
    )
    probe = misbehave.model_copy(update={"command": ("python3", "-c", code)})

    assert report(await sandbox.run(spec_of(probe)))["result"] == "PermissionError"


async def test_runs_unprivileged_without_the_docker_socket_or_unexpected_environment(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    seen = report(await sandbox.run(spec_of(misbehave, action="whoami")))

    assert (seen["uid"], seen["gid"]) == (65534, 65534)
    for capabilities in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
        assert int(seen[capabilities], 16) == 0, capabilities
    assert seen["NoNewPrivs"] == "1"
    assert seen["Seccomp"] == "2"  # Docker's default seccomp filter is on
    assert seen["docker_socket"] is False
    assert set(seen["environment"]) == EXPECTED_ENVIRONMENT | {"MAIL_FROM"}


async def test_a_process_ignoring_sigterm_is_killed_at_the_timeout(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    tool = misbehave.model_copy(update={"timeout_s": 2.0})

    outcome = await sandbox.run(spec_of(tool, action="ignore_term"))

    assert outcome.termination is Termination.TIMEOUT
    assert outcome.exit_code == 137  # SIGKILL after the grace, since SIGTERM was ignored
    assert "ignoring SIGTERM" in outcome.log_tail


async def test_an_output_flood_is_cut_at_the_output_limit(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    outcome = await sandbox.run(spec_of(misbehave, action="flood_output", bytes=64 * 2**20))

    assert outcome.termination is Termination.OUTPUT_LIMIT and outcome.truncated
    assert outcome.output is None
    assert outcome.stdout_tail and set(outcome.stdout_tail) == {"x"}


async def test_every_defense_flag_is_set_on_the_container(
    sandbox: DockerSandbox, misbehave: ToolDefinition, engine: Any
) -> None:
    spec = spec_of(misbehave, action="exit", code=0)
    outcome = await sandbox.run(spec)

    container = engine.inspect_container(outcome.container)
    host, limits = container["HostConfig"], misbehave.limits
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and not host["Privileged"]
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    shm = shared_memory_bytes(limits.scratch_bytes)
    scratch = limits.scratch_bytes - shm
    assert host["Tmpfs"] == {"/tmp": f"size={scratch},mode=1777,noexec,nosuid,nodev"}
    assert host["ShmSize"] == shm
    assert host["PidsLimit"] == limits.pids
    assert host["Memory"] == host["MemorySwap"] == limits.memory_bytes
    assert host["CpuQuota"] / host["CpuPeriod"] == limits.cpus  # the share, over 1 s
    assert host["CpuPeriod"] == 1_000_000
    assert host["Init"] and host["IpcMode"] == "private" and host["CgroupnsMode"] == "private"
    assert host["LogConfig"]["Type"] == "local"
    assert not host["Binds"] and not container["Mounts"]
    assert container["Config"]["User"] == "65534:65534"
    environment = dict(item.split("=", 1) for item in container["Config"]["Env"])
    assert json.loads(environment["BH_ARGUMENTS"]) == {"action": "exit", "code": 0}


# -- no writable place but the capped scratch ------------------------------------------------

#: Writes as much as it can under each path; reports bytes written and the error.
FILL = (
    "import json, os, sys\n"
    "seen = {}\n"
    "for place in sys.argv[1:]:\n"
    "    written, error = 0, None\n"
    "    try:\n"
    "        with open(os.path.join(place, 'fill'), 'wb') as out:\n"
    "            while written < 64 * 2**20:\n"
    "                out.write(b'x' * 2**20); out.flush(); written += 2**20\n"
    "    except OSError as failure:\n"
    "        error = failure.strerror\n"
    "    seen[place] = {'written': written, 'error': error}\n"
    "print(json.dumps(seen))\n"
)


@pytest.fixture(scope="session")
def volume_image(misbehave: ToolDefinition) -> Iterator[str]:
    """An image declaring ``VOLUME /data`` (with a file in it), built offline from the
    base image."""
    client = docker.DockerClient(timeout=120)
    try:
        recipe = (
            f"FROM {misbehave.image_id}\nUSER 0\n"
            "RUN mkdir -p /data && echo seed > /data/seed && chmod 1777 /data\n"
            "VOLUME /data\nUSER 65534:65534\n"
        )
        image, _ = client.images.build(
            fileobj=io.BytesIO(recipe.encode()), tag=VOLUME_IMAGE, rm=True
        )
        yield str(image.id)
    finally:
        client.close()


VOLUME_IMAGE = "bh-test/sandbox-volume:latest"


def filling(tool: ToolDefinition, *places: str) -> ToolDefinition:
    return tool.model_copy(update={"command": ("python3", "-c", FILL, *places)})


async def test_an_image_volume_is_no_writable_place_and_leaves_nothing_behind(
    sandbox: DockerSandbox, misbehave: ToolDefinition, volume_image: str, engine: Any
) -> None:
    volumes_before = {v["Name"] for v in engine.volumes()["Volumes"] or []}
    tool = filling(misbehave, "/data").model_copy(update={"image_id": volume_image})
    spec = spec_of(tool)

    seen = report(await sandbox.run(spec))["/data"]
    await sandbox.remove(spec.operation_id)

    assert seen["written"] == 0 and seen["error"] == "Read-only file system", seen
    assert {v["Name"] for v in engine.volumes()["Volumes"] or []} == volumes_before


async def test_scratch_and_shared_memory_together_stay_under_the_scratch_cap(
    sandbox: DockerSandbox, misbehave: ToolDefinition
) -> None:
    seen = report(await sandbox.run(spec_of(filling(misbehave, "/tmp", "/dev/shm"))))

    written = seen["/tmp"]["written"] + seen["/dev/shm"]["written"]
    assert 0 < written <= misbehave.limits.scratch_bytes, seen
    assert seen["/dev/shm"]["error"] == "No space left on device", seen


async def test_egress_containers_have_no_dns_upstream_that_could_exist(
    egress: Egress, misbehave: ToolDefinition, engine: Any
) -> None:
    tool = allowing(misbehave, f"127.0.0.1:{egress.allowed.port}")
    spec = spec_of(tool, action="exit", code=0)
    egress.policy[spec.operation_id] = tool.network.allow

    outcome = await egress.sandbox.run(spec)

    upstreams = engine.inspect_container(outcome.container)["HostConfig"]["Dns"]
    assert upstreams and all(ipaddress.ip_address(u).is_unspecified for u in upstreams), upstreams
