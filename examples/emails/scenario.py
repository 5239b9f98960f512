"""The five-emails scenario, shared by the demo and the tests: the request, the script,
and a worker configuration pointing at a running email service and model server."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import SecretStr

from brain.model.scripted import Script
from brain.model.settings import ModelSettings
from brain.worker import WorkerSettings

SCRIPT_PATH = Path(__file__).with_name("script.json")
REQUEST = "Send the approved maintenance notice to our five customers and summarise."
PLUGIN = "examples.emails.tasks:plugin"


def script() -> Script:
    return Script.load(SCRIPT_PATH)


def recipients() -> list[str]:
    arguments = script().turns[0].tool_calls[0].arguments
    assert isinstance(arguments, dict)
    return list(arguments["recipients"])


def worker_env(
    *, email_url: str, email_token: str, model_url: str, model_token: str, **extra: str
) -> dict[str, str]:
    """Environment for a ``python -m brain run`` worker of this example."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "BH_MODEL_BASE_URL": f"{model_url}/v1",
        "BH_MODEL_API_KEY": model_token,
        "BH_MODEL_NAME": "scripted-notices",
        "BH_EMAIL_SERVICE_URL": email_url,
        "BH_EMAIL_SERVICE_TOKEN": email_token,
        **extra,
    }


def worker_settings(
    store_url: str, session_id: str, *, model_url: str, model_token: str
) -> WorkerSettings:
    model = ModelSettings(
        base_url=f"{model_url}/v1", api_key=SecretStr(model_token), model="scripted-notices"
    )
    return WorkerSettings(
        store_url=store_url, session_id=session_id, plugins=(PLUGIN,), model=model
    )
