"""The helper servers as real processes: start, announce the address, answer, stop with 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from brain.model import ChatMessage, ModelSettings, OpenAIChatClient
from examples.emails.client import EmailClient
from tests.support.http_server import free_port
from tests.support.processes import ROOT

STARTUP = 30.0
MODEL_TOKEN = "scripted-cli-token-1d4e"
EMAIL_TOKEN = "email-cli-token-8b2f"


@asynccontextmanager
async def server_process(module: str, *args: str, env: dict[str, str]) -> AsyncIterator[str]:
    """Start ``python -m module``, yield the URL it announces, then SIGTERM it; exit must be 0."""
    process = await _spawn(module, *args, env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
    try:
        line = await asyncio.wait_for(_stdout(process).readline(), STARTUP)
        if not line.startswith(b"listening on "):
            stderr = await _stderr(process).read()
            pytest.fail(f"{module} did not announce itself: {line!r} {stderr.decode()}")
        yield line.decode().removeprefix("listening on ").strip()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), STARTUP) == 0
        assert b"Traceback" not in await _stderr(process).read()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await _drain(process)


async def _spawn(module: str, *args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def _stdout(process: asyncio.subprocess.Process) -> asyncio.StreamReader:
    assert process.stdout is not None
    return process.stdout


def _stderr(process: asyncio.subprocess.Process) -> asyncio.StreamReader:
    assert process.stderr is not None
    return process.stderr


async def _drain(process: asyncio.subprocess.Process) -> None:
    # Reading both pipes to EOF lets asyncio close their transports before the loop ends.
    await _stdout(process).read()
    await _stderr(process).read()


async def test_the_scripted_model_server_runs_as_a_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model": "cli-scripted", "turns": [{"content": "from a CLI"}]}))
    port = free_port()
    env = {"BH_SCRIPTED_MODEL_TOKEN": MODEL_TOKEN}
    async with server_process(
        "brain.model.scripted", "--script", str(script), "--port", str(port), env=env
    ) as url:
        settings = ModelSettings(
            base_url=f"{url}/v1",
            api_key=SecretStr(MODEL_TOKEN),
            model="cli-scripted",
            timeout=timedelta(seconds=10),
        )
        async with OpenAIChatClient(settings) as client:
            reply = await client.complete(
                [ChatMessage(role="user", content="hello")], request_id="cli-1"
            )
    assert url == f"http://127.0.0.1:{port}"
    assert (reply.content, reply.model) == ("from a CLI", "cli-scripted")


async def test_the_email_service_process_remembers_sends_across_a_restart(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.json"
    env = {"BH_EMAIL_SERVICE_TOKEN": EMAIL_TOKEN}
    arguments = ("--port", "0", "--ledger", str(ledger))
    async with (
        server_process("examples.emails.service", *arguments, env=env) as url,
        EmailClient(url, EMAIL_TOKEN, timeout=10) as emails,
    ):
        receipt = await emails.send("op-cli", "ada@example.com", "Hi", "From a process.")
    async with (
        server_process("examples.emails.service", *arguments, env=env) as url,
        EmailClient(url, EMAIL_TOKEN, timeout=10) as emails,
    ):
        found = await emails.query("op-cli")
        history = await emails.ledger()
    assert found == receipt
    assert history.requests == {"op-cli": 1}


@pytest.mark.parametrize(
    ("module", "variable"),
    [
        ("brain.model.scripted", "BH_SCRIPTED_MODEL_TOKEN"),
        ("examples.emails.service", "BH_EMAIL_SERVICE_TOKEN"),
    ],
)
async def test_a_server_without_its_token_refuses_to_start(
    tmp_path: Path, module: str, variable: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text('{"turns": [{"content": "x"}]}')
    env = {key: value for key, value in os.environ.items() if key != variable}
    script_args = ("--script", str(script)) if module == "brain.model.scripted" else ()
    process = await _spawn(module, "--port", "0", *script_args, env=env)
    _, stderr = await asyncio.wait_for(process.communicate(), STARTUP)
    assert process.returncode == 2
    assert variable in stderr.decode()
