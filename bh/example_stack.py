"""``bh up --example five-emails``: the worked example's services beside the system.

It adds the example email service and the scripted model (each its own process, on
fixed loopback ports), registers the ``send-email`` tool image (built once, offline,
cached) granted only the email service's address, gives the email service's token to
the Hands' egress proxy (never to a container), and points the Brains at the model and
the example's plugin, with ``send_email`` run sandboxed on the Hands. Then
``bh submit SESSION "Send the approved maintenance notice to our five customers."``
runs it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from examples.emails import scenario
from hands.images import build_images, tool_tag
from hands.registry import register_image
from hands.sandbox.docker import DockerSandbox, DockerSandboxConfig
from session_store import open_store

EMAIL_PORT = 8025
MODEL_PORT = 8026
EXAMPLES = ("five-emails",)


@dataclass(frozen=True)
class Example:
    #: name → (argv, health URL)
    services: dict[str, tuple[tuple[str, ...], str]]
    env: dict[str, str]
    plugins: list[str] = field(default_factory=list)
    sandboxed: list[str] = field(default_factory=list)


def five_emails(root: Path, tokens: dict[str, str]) -> Example:
    """The services, environment and Brain options of the five-emails example."""
    email_url = f"http://127.0.0.1:{EMAIL_PORT}"
    model_url = f"http://127.0.0.1:{MODEL_PORT}"
    credentials = root / "email-credentials.json"
    headers = {"Authorization": f"Bearer {tokens['BH_EMAIL_SERVICE_TOKEN']}"}
    credentials.write_text(json.dumps({f"127.0.0.1:{EMAIL_PORT}": headers}))
    credentials.chmod(0o600)
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
    )


def register_tools(store_url: str, docker_url: str) -> str:
    """Build (cached) and register ``send-email`` for the example; its reference."""

    async def register() -> str:
        await build_images(docker_url, names=["send-email"], say=lambda _: None)
        store = await open_store(store_url)
        try:
            config = DockerSandboxConfig(owner="bh-up", docker_url=docker_url)
            async with DockerSandbox(config) as docker:
                tool = await register_image(
                    store,
                    docker,
                    tool_tag("send-email"),
                    allow=[f"127.0.0.1:{EMAIL_PORT}"],
                    config={"EMAIL_SERVICE_URL": f"http://127.0.0.1:{EMAIL_PORT}"},
                    registered_by="bh up --example five-emails",
                )
        finally:
            await store.close()
        return tool.ref

    return asyncio.run(register())
