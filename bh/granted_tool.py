"""A shipped tool image granted one HTTP service: built (cached, offline), registered
with only the service's ``host:port`` allowed, and the credentials file that gives the
Hands' egress proxy the service's bearer token (``BH_HANDS_CREDENTIALS``) — the token
never reaches a container. Used by the demo, ``bh up --example`` and ``bh chaos``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from contracts.tool import ToolDefinition
from hands.images import Say, build_images, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import SessionStore


def destination(url: str) -> str:
    """``host:port`` of a service URL: what an egress grant names."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def write_credentials(path: Path, grants: Mapping[str, str]) -> Path:
    """A credentials file (mode 0600) for the egress proxy: service URL → bearer token."""
    headers = {
        destination(url): {"Authorization": f"Bearer {token}"} for url, token in grants.items()
    }
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:  # never readable by others, not even briefly
        os.fchmod(file.fileno(), 0o600)  # an existing file keeps its mode through O_CREAT
        file.write(json.dumps(headers))
    return path


async def register_granted(
    store: SessionStore,
    docker_url: str,
    directory: str,
    *,
    service_url: str,
    config: Mapping[str, str],
    owner: str,
    registered_by: str,
    say: Say = lambda _: None,
) -> tuple[ToolDefinition, bool]:
    """Build ``sandbox-images/tools/<directory>`` when out of date, then register it
    allowed only ``service_url``; the definition, and whether the build was skipped.
    ``say`` hears the build's progress (the first base build takes about a minute)."""
    built = await build_images(docker_url, names=[directory], say=say)
    image = built[tool_tag(directory)]
    async with DockerSandbox(DockerSandboxConfig(owner=owner, docker_url=docker_url)) as docker:
        tool = await register_image(
            store,
            docker,
            image.tag,
            allow=[destination(service_url)],
            config=config,
            registered_by=registered_by,
        )
    return tool, image.skipped
