"""SIGKILL the Brain worker of the five-emails example at every commit boundary and
around every external call, one run per point, then resume in a fresh process.

The points are enumerated deterministically: a clean run records every point it
passes (``BH_CRASH_TRACE``); then each point gets its own session, a worker that kills
itself exactly there (``BH_CRASH_AT``), and a fresh worker that finishes the job. For
every point: the submission completes, the email service sent each notice exactly once
and was asked to send it exactly once, the summary lists five receipts, and each
operation's result entered the session once.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from examples.emails import scenario
from examples.emails.client import EmailClient
from session_store import SessionStore, open_store
from tests.support.example_servers import EMAIL_TOKEN, ExampleServers, example_servers
from tests.support.five_emails import check_invariants, submit
from tests.support.processes import ROOT

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

PARALLEL = 2


@pytest.fixture(scope="module")
def servers() -> object:
    with example_servers(scenario.SCRIPT_PATH) as running:
        yield running


async def worker(servers: ExampleServers, store_url: str, session_id: str, **env: str) -> int:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "brain", "run", "--store", store_url, "--session", session_id),
        "--plugin",
        scenario.PLUGIN,
        cwd=ROOT,
        env=servers.worker_env(**env),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=120)
    code = process.returncode
    assert code is not None
    if code not in (0, -signal.SIGKILL):
        raise AssertionError(f"worker failed ({code}): {err.decode()[-2000:]}")
    return code


async def crash_and_resume(
    servers: ExampleServers, store: SessionStore, store_url: str, session_id: str, point: str
) -> None:
    await submit(store, session_id)
    killed = await worker(servers, store_url, session_id, BH_CRASH_AT=point)
    assert killed == -signal.SIGKILL, f"point {point} was never reached"
    assert await worker(servers, store_url, session_id) == 0


async def test_every_crash_point_recovers(servers: ExampleServers, tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path}/store.db"
    store = await open_store(store_url)
    trace = tmp_path / "trace.tsv"
    await submit(store, "trace")
    assert await worker(servers, store_url, "trace", BH_CRASH_TRACE=str(trace)) == 0
    points = [line.split("\t") for line in trace.read_text().splitlines()]
    names = {name.rsplit("#", 1)[0] for _, name in points}
    assert {"commit:claim", "call:before:send_email", "call:after:send_email"} <= names
    assert "call:after:model" in names and "commit:send-notice:start" in names

    gate = asyncio.Semaphore(PARALLEL)

    async def one(index: str, name: str) -> None:
        async with gate:
            await crash_and_resume(servers, store, store_url, f"crash-{index}", index)

    await asyncio.gather(*(one(index, name) for index, name in points))
    async with EmailClient(servers.email_url, EMAIL_TOKEN) as email:
        await check_invariants(store, email, "trace", "clean run")
        for index, name in points:
            await check_invariants(store, email, f"crash-{index}", f"crash at {index} ({name})")
    await store.close()


async def test_seed_case_reuses_verifies_and_sends(servers: ExampleServers, tmp_path: Path) -> None:
    """Crash after email 3 is confirmed and email 4 was accepted but not saved."""
    store_url = f"sqlite:///{tmp_path}/store.db"
    store = await open_store(store_url)
    await crash_and_resume(servers, store, store_url, "seed", "call:after:send_email#4")
    async with EmailClient(servers.email_url, EMAIL_TOKEN) as email:
        receipts = await check_invariants(store, email, "seed", "seed case")
    assert [r["recovery"] for r in receipts] == [
        "reused",
        "reused",
        "reused",
        "verified",
        "executed",
    ]
    first, second = {r["settled_by"] for r in receipts[:3]}, {r["settled_by"] for r in receipts[3:]}
    assert len(first) == len(second) == 1 and first != second, "two incarnations, one each side"
    await store.close()
