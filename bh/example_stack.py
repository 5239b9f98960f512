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
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bh.granted_tool import register_granted, write_credentials
from examples.emails import scenario
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
    )


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
