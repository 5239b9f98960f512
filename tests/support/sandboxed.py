"""The five-emails example with ``send_email`` sandboxed: real Brain and Hands processes,
real NATS, real Docker (the ``send-email`` image), the example email service.

Each ``Rig`` has its own bus namespace and container owner, so rigs run side by side
and never see each other's dispatches or containers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from bus import BusSettings
from contracts.tool import ToolDefinition
from examples.emails import scenario
from hands.images import tool_tag
from hands.registry import register_image
from hands.sandbox import LABEL_OWNER
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import SessionStore
from tests.support.example_servers import EMAIL_TOKEN, ExampleServers
from tests.support.processes import ROOT

DOCKER = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
#: the container owners of this process's rigs (other test processes have their own)
_OWNERS: set[str] = set()


async def register_send_email(store: SessionStore, email_url: str) -> ToolDefinition:
    """``send-email`` granted exactly the email service's host:port."""
    parts = urlsplit(email_url)
    destination = f"{parts.hostname}:{parts.port}"
    async with DockerSandbox(DockerSandboxConfig(owner="registrar", docker_url=DOCKER)) as docker:
        return await register_image(
            store,
            docker,
            tool_tag("send-email"),
            allow=[destination],
            config={"EMAIL_SERVICE_URL": email_url},
            registered_by="tests",
        )


@dataclass
class Rig:
    tmp: Path
    store_url: str
    servers: ExampleServers
    nats_url: str
    namespace: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    hands_started: int = 0

    def __post_init__(self) -> None:
        _OWNERS.add(self.owner)

    @property
    def bus(self) -> BusSettings:
        return BusSettings(url=self.nats_url, namespace=self.namespace)

    @property
    def owner(self) -> str:
        return f"test-{self.namespace}"

    def credentials(self) -> Path:
        """The email service's token, for the egress proxy only (never a container)."""
        parts = urlsplit(self.servers.email_url)
        path = self.tmp / f"credentials-{self.namespace}.json"
        if not path.exists():
            headers = {"Authorization": f"Bearer {EMAIL_TOKEN}"}
            path.write_text(json.dumps({f"{parts.hostname}:{parts.port}": headers}))
            path.chmod(0o600)
        return path

    def hands_log(self, number: int) -> Path:
        """Where the ``number``-th Hands this rig started writes its output."""
        return self.tmp / f"hands-{self.namespace}-{number}.log"

    async def hands(self, **env: str) -> asyncio.subprocess.Process:
        self.hands_started += 1
        name = f"hands-{self.namespace}-{self.hands_started}"
        log = self.hands_log(self.hands_started).open("ab")
        try:
            return await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "hands", "--sandbox", "docker"),
                cwd=ROOT,
                env={
                    **os.environ,
                    "PYTHONUNBUFFERED": "1",
                    "DOCKER_HOST": DOCKER,
                    "BH_STORE_URL": self.store_url,
                    "BH_NATS_URL": self.nats_url,
                    "BH_NAMESPACE": self.namespace,
                    "BH_HANDS_ID": name,
                    "BH_HANDS_OWNER": self.owner,
                    "BH_HANDS_ACK_WAIT": "3",
                    "BH_HANDS_CREDENTIALS": str(self.credentials()),
                    "BH_HANDS_SECRET_FILE": str(self.tmp / "hands.secret"),
                    **env,
                },
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        finally:
            log.close()

    async def brain(self, session_id: str, **env: str) -> int:
        """``python -m brain run`` with ``send_email`` on the Hands, to its end."""
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "brain", "run", "--store", self.store_url),
            *("--session", session_id, "--plugin", scenario.PLUGIN),
            *("--sandboxed", "send_email"),
            cwd=ROOT,
            env=self.servers.worker_env(
                BH_NATS_URL=self.nats_url, BH_NAMESPACE=self.namespace, **env
            ),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await asyncio.wait_for(process.communicate(), timeout=180)
        except TimeoutError:  # never leave a worker behind
            process.kill()
            await process.wait()
            raise
        code = process.returncode
        assert code is not None
        if code not in (0, -signal.SIGKILL):
            raise AssertionError(f"brain failed ({code}): {err.decode()[-2000:]}")
        return code


async def stop(process: asyncio.subprocess.Process, signum: int = signal.SIGTERM) -> int:
    if process.returncode is None:
        process.send_signal(signum)
    try:
        return await asyncio.wait_for(process.wait(), 20)
    except TimeoutError:
        process.kill()
        return await process.wait()


def remove_test_containers() -> int:
    """Remove containers left by this process's rigs: a Hands stopped right after its
    last result leaves that container to its next incarnation's reaper, which a test
    never starts. Rigs of other test processes running side by side keep theirs."""
    import docker  # type: ignore[import-untyped]

    client = docker.DockerClient(base_url=DOCKER)
    try:
        left = [
            c
            for c in client.containers.list(all=True, filters={"label": LABEL_OWNER})
            if c.labels.get(LABEL_OWNER, "") in _OWNERS
        ]
        for container in left:
            container.remove(force=True)
        return len(left)
    finally:
        client.close()
