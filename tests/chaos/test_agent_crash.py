"""The agent loop across killed processes: every model request attempt that a crash cut
short is on record once, as an interruption, and none is used as a response."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from contracts import EntryKind, SubmissionStatus
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.example_servers import ExampleServers, example_servers
from tests.support.processes import brain_run

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def worker(servers: ExampleServers, store_url: str, **env: str) -> int:
    return brain_run(store_url, env=servers.worker_env(**env)).returncode


async def test_two_killed_request_attempts_are_both_recorded(tmp_path: Path) -> None:
    # Issue 6, defect 13: only the attempt right before the surviving one was recorded.
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model": "m", "turns": [{"content": "hello after all"}]}))
    store_url = f"sqlite:///{tmp_path}/store.db"
    store = await open_store(store_url)
    await SessionClient(store).submit("s1", "r1", {"text": "hi"})
    with example_servers(script) as servers:
        crashes = [worker(servers, store_url, BH_CRASH_AT="call:before:model#1") for _ in range(2)]
        assert crashes == [-signal.SIGKILL] * 2
        assert worker(servers, store_url) == 0
    session = await store.session("s1")
    entries = await session.entries()
    interruptions = [e.content for e in entries if e.kind is EntryKind.INTERRUPTION]
    assert [i["attempt"] for i in interruptions] == [1, 2]  # type: ignore[index]
    responses = [e for e in entries if e.kind is EntryKind.MODEL_RESPONSE]
    assert len(responses) == 1
    assert session.state.submissions["r1"].status is SubmissionStatus.ANSWERED
    await store.close()
