"""A model server's 429 with Retry-After, against the scripted model over real HTTP: the
agent's request becomes a durable backoff — the task is pending until then, the drive
ends (the Brain lets go of the session) and asks to be woken at that time — and the
next drive after it gets the answer."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

from pydantic import SecretStr

from brain.model.openai import retry_after
from brain.model.scripted import Script, scripted_app
from brain.model.settings import ModelSettings
from brain.worker import BrainSettings, build
from contracts import EntryKind, SubmissionStatus, TaskStatus, utcnow
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve

SCRIPT = Script.model_validate(
    {
        "model": "m",
        "turns": [{"content": "hi", "fail_first": 1, "fail_status": 429, "retry_after": 2}],
    }
)


async def test_a_429_with_retry_after_is_a_durable_backoff_that_holds_no_session(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    await SessionClient(store).submit("s1", "r1", "hello")
    async with serve(scripted_app(SCRIPT, token="t")) as model_url, AsyncExitStack() as stack:
        model = ModelSettings(base_url=f"{model_url}/v1", api_key=SecretStr("t"), model="m")
        built = await build(BrainSettings(store_url=url, model=model), stack)
        asked = utcnow()
        report = await built.runner.drive("s1")
        assert report.active and report.next_wake_at is not None, "the drive ended, to wake"
        wait = report.next_wake_at - asked
        assert timedelta(seconds=1.5) <= wait <= timedelta(seconds=5), wait
        root = (await store.session("s1")).state.tasks["root.r1"]
        assert root.status is TaskStatus.PENDING and "HTTP 429" in (root.reason or "")
        early = await built.runner.drive("s1")
        assert early.commits == 0, "woken early: nothing to do, nothing written"
        await asyncio.sleep((report.next_wake_at - utcnow()).total_seconds() + 0.05)
        again = await built.runner.drive("s1")
        assert not again.active
    state = (await store.session("s1")).state
    assert state.submissions["r1"].status is SubmissionStatus.ANSWERED
    entries = await (await store.session("s1")).entries()
    notes = [e for e in entries if e.kind is EntryKind.INTERRUPTION]
    assert len(notes) == 1 and "HTTP 429" in str(notes[0].content)
    await store.close()


def test_retry_after_reads_seconds_and_dates_and_bounds_them() -> None:
    assert retry_after("7") == 7 and retry_after(" 0 ") == 0
    assert retry_after("-3") == 0 and retry_after("999999") == 3600
    assert retry_after(None) is None and retry_after("soon") is None and retry_after("nan") is None
    sent = "Wed, 21 Oct 2015 07:28:00 GMT"  # the response's Date: the server's clock
    assert retry_after("Wed, 21 Oct 2015 07:28:30 GMT", sent) == 30
    assert retry_after("Wed, 21 Oct 2015 07:27:00 GMT", sent) == 0  # in the past
    assert retry_after("Wed, 21 Oct 2015 07:28:30 GMT") is None  # no Date to read it by
