"""SIGKILL a Brain while a model streams, right after a preview's deferred commit, and
after the stream ended but before its answer was committed: the recovered run keeps the
last written preview as the interruption record (a prefix of the answer, marked as a
preview), answers with the retried call's whole answer, and leaves no preview behind."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from brain.model.scripted import Script, scripted_app
from contracts import PROGRESS_DOCUMENT, EntryKind
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve
from tests.support.processes import brain_run, model_env

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

ANSWER = " ".join(f"w{n}" for n in range(40))
SCRIPT = Script.model_validate({"model": "m", "turns": [{"content": ANSWER, "stream_pause": 0.02}]})


@pytest.mark.parametrize("crash_at", ["commit:progress#2", "call:after:model#1"])
async def test_a_crash_keeps_the_last_written_preview_as_a_record_only(
    tmp_path: Path, crash_at: str
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    await SessionClient(store).submit("s1", "r1", "tell me")
    async with serve(scripted_app(SCRIPT, token="t")) as model_url:
        env = model_env(
            model_url,
            BH_MODEL_STREAM="1",
        )
        killed = await asyncio.to_thread(brain_run, url, env={**env, "BH_CRASH_AT": crash_at})
        assert killed.returncode == -signal.SIGKILL
        crashed = await store.session("s1")
        written = crashed.state.documents[PROGRESS_DOCUMENT].body["root.r1"]
        done = await asyncio.to_thread(brain_run, url, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    handle = await store.session("s1")
    entries = await handle.entries()
    records = [r async for r in store.history("s1")]
    await store.close()

    assert written["preview"] is True and ANSWER.startswith(written["text"])
    notes: list[Any] = [e.content for e in entries if e.kind is EntryKind.INTERRUPTION]
    assert len(notes) == 1, notes
    assert notes[0]["preview"]["text"] == written["text"], "the last written preview, kept"
    said: list[Any] = [e.content for e in entries if e.kind is EntryKind.MODEL_RESPONSE]
    responses = [content["content"] for content in said]
    assert responses == [ANSWER], "never used as a response"
    assert handle.state.submissions["r1"].answer == ANSWER
    assert "root.r1" not in handle.state.documents[PROGRESS_DOCUMENT].body
    assert all(r.writer_fence is not None for r in records if r.commit.documents), "fenced"
