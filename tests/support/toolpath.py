"""The sandboxed tool path for tests: a bus namespace of its own, tools that count their
runs in a ledger file, a Hands service in this process, and Brain services with a relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats.js.errors

from brain.relay import OutboxRelay
from brain.services import Services
from brain.tools import LocalDispatcher
from bus import DISPATCH_STREAM, RESULTS_STREAM, Bus, BusSettings
from contracts import ReplayPolicy, utcnow
from contracts.tool import ToolDefinition
from hands.executor import Executor
from hands.sandbox import Sandbox
from hands.service import ConsumerSettings, HandsService, publisher
from runtime.cancellation import cancel_and_wait
from runtime.crashpoints import CrashPoints
from session_store import SessionStore
from tests.support.processes import ROOT
from tests.support.services import require

# Appends the operation id to $LEDGER (the action), then prints its output.
ACT = """
import json, os, sys, time
args = json.loads(os.environ["BH_ARGUMENTS"])
time.sleep(args.get("sleep", 0))
with open(os.environ["LEDGER"], "a") as ledger:
    ledger.write(os.environ["BH_OPERATION_ID"] + "\\n")
print(json.dumps({"echo": args.get("message"), "op": os.environ["BH_OPERATION_ID"]}))
sys.exit(args.get("exit", 0))
"""
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string"},
        "sleep": {"type": "number"},
        "exit": {"type": "integer"},
    },
    "additionalProperties": False,
}


def ledger_tool(
    name: str, ledger: Path, replay: ReplayPolicy = ReplayPolicy.SAFE
) -> ToolDefinition:
    """A tool for the process sandbox that records each run of its action in ``ledger``."""
    return ToolDefinition(
        name=name,
        version=1,
        parameters=SCHEMA,
        replay=replay,
        timeout_s=30,
        command=(sys.executable, "-c", ACT),
        config={"LEDGER": str(ledger)},
        image=f"test/{name}",
        image_id=f"sha256:{name}",
    )


def runs(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def bus_settings() -> BusSettings:
    """A namespace of this test's own on the real NATS server."""
    url = require("BH_NATS_URL", "NATS JetStream")
    return BusSettings(url=url, namespace=f"t{uuid.uuid4().hex[:10]}")


@asynccontextmanager
async def scratch_bus(settings: BusSettings | None = None) -> AsyncIterator[Bus]:
    """A connected bus whose streams are deleted afterwards."""
    bus = await Bus.connect(settings or bus_settings())
    try:
        yield bus
    finally:
        for stream in (DISPATCH_STREAM, RESULTS_STREAM):
            with contextlib.suppress(nats.js.errors.Error):
                await bus.js.delete_stream(bus.stream(stream))
        await bus.close()


@asynccontextmanager
async def running_hands(
    store: SessionStore,
    sandbox: Sandbox,
    bus: Bus,
    *,
    executor_id: str = "hands-test",
    concurrency: int = 4,
) -> AsyncIterator[HandsService]:
    executor = Executor(
        store=store, sandbox=sandbox, publish=publisher(bus), executor_id=executor_id
    )
    service = HandsService(
        bus=bus, executor=executor, settings=ConsumerSettings(concurrency=concurrency)
    )
    running = asyncio.create_task(service.run())
    try:
        yield service
    finally:
        await service.shutdown()
        await cancel_and_wait(running)


def brain_services(
    store: SessionStore, tools: LocalDispatcher, bus: Bus, runner_id: str = "brain-test"
) -> Services:
    crash = CrashPoints()
    return Services(
        store=store,
        tools=tools,
        crash=crash,
        clock=utcnow,
        runner_id=runner_id,
        relay=OutboxRelay(bus, crash, store),
    )


def hands_process(
    store_url: str,
    bus: BusSettings,
    root: Path,
    *,
    name: str,
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """A ``python -m hands`` process on the process sandbox (``root`` plays its host)."""
    with (log or root.parent / f"{name}.log").open("ab") as out:
        return _popen_hands(out, store_url, bus, root, name, env or {})


def _popen_hands(
    out: Any, store_url: str, bus: BusSettings, root: Path, name: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hands", "--sandbox", "process"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "BH_STORE_URL": store_url,
            "BH_NATS_URL": bus.url,
            "BH_NAMESPACE": bus.namespace,
            "BH_HANDS_PROCESS_ROOT": str(root),
            "BH_HANDS_ID": name,
            "BH_HANDS_ACK_WAIT": "3",
            **env,
        },
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def stop(process: subprocess.Popen[bytes], signum: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(signum)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
