"""``bh up --example NAME``: an example's services and tools beside the system.

``five-emails`` (the worked example) adds the example email service and the scripted
model (each its own process, on fixed loopback ports), registers the ``send-email``
tool image (built once, offline, cached) granted only the email service's address,
gives the email service's token to the Hands' egress proxy (never to a container), and
points the Brains at the model and the example's plugin, with ``send_email`` run
sandboxed on the Hands. Then ``bh submit SESSION "Send the approved maintenance notice
to our five customers."`` runs it.

``coding`` (the coding assistant, ``docs/workspaces.md``) adds its scripted model and
registers the ``write_files`` and ``run_command`` images, which mount the session's
workspace read-write and reach no network; ``bh submit SESSION "Write the calc package
with its tests, run them, and fix what fails."`` runs it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bh.granted_tool import register_granted, write_credentials
from examples.coding import scenario as coding
from examples.emails import scenario
from hands.images import build_images, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import open_store

EMAIL_PORT = 8025
MODEL_PORT = 8026
CODING_MODEL_PORT = 8027


@dataclass(frozen=True)
class Example:
    #: name → (argv, health URL)
    services: dict[str, tuple[tuple[str, ...], str]]
    env: dict[str, str]
    plugins: list[str] = field(default_factory=list)
    sandboxed: list[str] = field(default_factory=list)
    #: builds (cached) and registers its tool images: (store URL, Docker URL) → references
    register: Callable[[str, str], list[str]] = lambda store_url, docker_url: []


def five_emails(root: Path, tokens: dict[str, str]) -> Example:
    """The services, environment and Brain options of the five-emails example."""
    email_url = f"http://127.0.0.1:{EMAIL_PORT}"
    model_url = f"http://127.0.0.1:{MODEL_PORT}"
    credentials = write_credentials(
        root / "email-credentials.json", {email_url: tokens["BH_EMAIL_SERVICE_TOKEN"]}
    )
    python = sys.executable
    model = (python, "-m", "brain.model.scripted", "--script", str(scenario.SCRIPT_PATH))
    return Example(
        services={
            "email-service": (
                (python, "-m", "examples.emails.service", "--port", str(EMAIL_PORT)),
                f"{email_url}/healthz",
            ),
            "model": (
                (*model, "--port", str(MODEL_PORT)),
                f"{model_url}/healthz",
            ),
        },
        env={
            "BH_MODEL_BASE_URL": f"{model_url}/v1",
            "BH_MODEL_API_KEY": tokens["BH_SCRIPTED_MODEL_TOKEN"],
            "BH_MODEL_NAME": scenario.script().model,
            "BH_EMAIL_SERVICE_URL": email_url,
            "BH_HANDS_CREDENTIALS": str(credentials),
        },
        plugins=[scenario.PLUGIN],
        sandboxed=["send_email"],
        register=lambda store_url, docker_url: [register_tools(store_url, docker_url)],
    )


def coding_assistant(root: Path, tokens: dict[str, str]) -> Example:
    """The services, environment and Brain options of the coding-assistant example: the
    agent with ``write_files`` and ``run_command``, both run on the Hands in a sandbox
    that mounts the session's workspace."""
    model_url = f"http://127.0.0.1:{CODING_MODEL_PORT}"
    script = ("--script", str(coding.SCRIPT_PATH), "--port", str(CODING_MODEL_PORT))
    return Example(
        services={
            "coding-model": (
                (sys.executable, "-m", "brain.model.scripted", *script),
                f"{model_url}/healthz",
            )
        },
        env={
            "BH_MODEL_BASE_URL": f"{model_url}/v1",
            "BH_MODEL_API_KEY": tokens["BH_SCRIPTED_MODEL_TOKEN"],
            "BH_MODEL_NAME": coding.model_name(),
        },
        sandboxed=[coding.WRITE, coding.RUN],
        register=register_workspace_tools,
    )


#: name → the example's parts (``bh up --example NAME``)
EXAMPLES: dict[str, Callable[[Path, dict[str, str]], Example]] = {
    "five-emails": five_emails,
    "coding": coding_assistant,
}


def register_workspace_tools(store_url: str, docker_url: str) -> list[str]:
    """Build (cached) and register the coding example's images, granted no network."""

    async def register() -> list[str]:
        built = await build_images(docker_url, names=list(coding.IMAGES))
        store = await open_store(store_url)
        try:
            config = DockerSandboxConfig(owner="bh-up", docker_url=docker_url)
            async with DockerSandbox(config) as docker:
                return [
                    (
                        await register_image(
                            store,
                            docker,
                            built[tool_tag(name)].tag,
                            registered_by="bh up --example coding",
                        )
                    ).ref
                    for name in coding.IMAGES
                ]
        finally:
            await store.close()

    return asyncio.run(register())


def register_tools(store_url: str, docker_url: str) -> str:
    """Build (cached) and register ``send-email`` for the example; its reference."""

    async def register() -> str:
        email_url = f"http://127.0.0.1:{EMAIL_PORT}"
        store = await open_store(store_url)
        try:
            tool, _ = await register_granted(
                store,
                docker_url,
                "send-email",
                service_url=email_url,
                config={"EMAIL_SERVICE_URL": email_url},
                owner="bh-up",
                registered_by="bh up --example five-emails",
            )
        finally:
            await store.close()
        return tool.ref

    return asyncio.run(register())
