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
from collections import Counter
from pathlib import Path

import pytest

from brain.submissions import SessionClient
from contracts import CommitRecord, Outcome, SubmissionStatus
from examples.emails import scenario
from examples.emails.client import EmailClient
from examples.emails.tasks import notice_operation_id
from session_store import SessionStore, layout, open_store
from session_store.codec import decode
from tests.support.example_servers import EMAIL_TOKEN, ExampleServers, example_servers
from tests.support.processes import ROOT

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

BATCH = "root.req.r1.c0.run"
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


async def submit(store: SessionStore, session_id: str) -> None:
    await SessionClient(store).submit(session_id, "req", {"text": scenario.REQUEST})


def expected_operations(session_id: str) -> dict[str, str]:
    return {
        to: notice_operation_id(session_id, BATCH, index)
        for index, to in enumerate(scenario.recipients())
    }


async def check_invariants(
    store: SessionStore, email: EmailClient, session_id: str, where: str
) -> list[dict[str, object]]:
    session = await store.session(session_id)
    submission = session.state.submissions["req"]
    assert submission.status is SubmissionStatus.ANSWERED, f"{where}: {submission.status}"
    operations = expected_operations(session_id)
    ledger = await email.ledger()
    sent = Counter(m.operation_id for m in ledger.messages)
    for to, operation_id in operations.items():
        assert sent[operation_id] == 1, f"{where}: {to} was sent {sent[operation_id]} times"
        asked = ledger.requests.get(operation_id)
        assert asked == 1, f"{where}: {to} was requested {asked} times (blind re-send?)"
    batch = session.state.tasks[BATCH]
    receipts: list[dict[str, object]] = batch.result["receipts"]  # type: ignore[index]
    assert batch.outcome is Outcome.SUCCEEDED and len(receipts) == 5, where
    assert [r["to"] for r in receipts] == list(operations), where
    applied: Counter[str] = Counter()
    for item, data in await store.backend.items(layout.log_partition(session_id)):
        applied.update(decode(data, CommitRecord, where=item).commit.applied_operations)
    assert all(count == 1 for count in applied.values()), f"{where}: applied twice: {applied}"
    assert set(operations.values()) <= set(applied), f"{where}: a result was never applied"
    return receipts


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
