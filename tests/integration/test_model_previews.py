"""Streamed text is saved by deferred commits: the ``progress`` document, written at
most once per interval by the lease holder, holding nothing else; the answer's commit
drops the preview it supersedes; a stream cut keeps what it streamed as a record that
is never used as a response."""

from __future__ import annotations

import asyncio
import os
from contextlib import aclosing
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from rich.console import Console

from bh.session_client import SessionApiClient, StreamItem, merge, with_preview
from bh.session_commands import render
from brain.model.scripted import Script, scripted_app
from brain.model.settings import ModelSettings
from brain.worker import WorkerSettings, run_worker
from contracts import PROGRESS_DOCUMENT, CommitRecord, EntryKind
from session_api.app import create_app
from session_api.views import CommitEvent, PreviewView, SessionView
from session_store import SessionStore, open_store
from session_store.submissions import SessionClient
from tests.integration.test_session_api import FAST, TOKEN, RecordingWakes
from tests.support.http_server import serve

WORDS = 60
ANSWER = " ".join(f"w{n}" for n in range(WORDS))
PAUSE = 0.02  # 60 pieces over ~1.2 s


async def run(tmp_path: Path, turns: list[dict[str, object]], **model: object) -> SessionStore:
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    await SessionClient(store).submit("s1", "r1", "tell me")
    script = Script.model_validate({"model": "m", "turns": turns})
    async with serve(scripted_app(script, token="t")) as url:
        settings = WorkerSettings(
            store_url=store.backend.description,
            session_id="s1",
            model=ModelSettings(
                base_url=f"{url}/v1", api_key=SecretStr("t"), model="m", stream=True, **model
            ),
        )
        await run_worker(settings)
    return store


async def log_of(store: SessionStore) -> list[CommitRecord]:
    return [r async for r in store.history("s1")]


def previews(records: list[CommitRecord]) -> list[tuple[CommitRecord, dict[str, Any]]]:
    found = []
    for record in records:
        for write in record.commit.documents:
            if write.name == PROGRESS_DOCUMENT and write.op == "patch":
                member = write.patch.get("root.r1")
                if isinstance(member, dict):
                    found.append((record, member))
    return found


async def test_streamed_text_is_written_at_a_bounded_rate_then_superseded(
    tmp_path: Path,
) -> None:
    store = await run(tmp_path, [{"content": ANSWER, "stream_pause": PAUSE}])
    records = await log_of(store)
    handle = await store.session("s1")
    await store.close()

    written = previews(records)
    only_previews = [r for r, _ in written if len(r.commit.documents) == 1]
    # ~1.2 s of streaming at one write per 250 ms: about 5, never one per piece
    took = (records[-1].committed_at - records[0].committed_at).total_seconds()
    assert 2 <= len(only_previews) <= took / 0.25 + 2, [(r.seq, r.committed_at) for r, _ in written]
    for record in only_previews:
        assert not record.commit.entries and not record.commit.tasks, "previews carry nothing else"
        assert record.writer_fence is not None, "written by the lease holder, under its fence"
    texts = [str(member["text"]) for _, member in written]
    assert all(ANSWER.startswith(text) for text in texts), "a preview is a prefix of the answer"
    assert texts == sorted(texts, key=len), "previews only grow"
    assert all(member["preview"] is True for _, member in written)

    answered = handle.state.submissions["r1"]
    assert answered.answer == ANSWER
    progress = handle.state.documents.get(PROGRESS_DOCUMENT)
    assert progress is None or "root.r1" not in progress.body, "the answer superseded it"


async def test_a_preview_keeps_its_first_characters_and_says_it_was_cut(tmp_path: Path) -> None:
    store = await run(tmp_path, [{"content": ANSWER, "stream_pause": PAUSE}], preview_chars=20)
    written = previews(await log_of(store))
    await store.close()
    assert written, "something was previewed"
    last = written[-1][1]
    assert last["text"] == ANSWER[:20] and last["truncated"] is True
    assert int(str(last["chars"])) > 20
    # past the cap the text stops changing: it is not written again (~1 s of stream)
    shown = [(member["text"], member["truncated"]) for _, member in written]
    repeats = [seen for seen, before in zip(shown[1:], shown, strict=False) if seen == before]
    assert not repeats, f"{len(repeats)} of {len(shown)} previews repeat the one before"


async def test_a_cut_stream_keeps_its_text_as_a_record_never_as_the_response(
    tmp_path: Path,
) -> None:
    cut = {"content": ANSWER, "stream_pause": PAUSE, "stream_cut_after": 30, "stream_cut_times": 1}
    store = await run(tmp_path, [cut])
    handle = await store.session("s1")
    entries = await handle.entries()
    await store.close()
    notes: list[Any] = [e.content for e in entries if e.kind is EntryKind.INTERRUPTION]
    assert len(notes) == 1
    kept = notes[0]["preview"]["text"]
    assert ANSWER.startswith(kept) and len(kept.split()) == 29, "the words before the cut"
    said: list[Any] = [e.content for e in entries if e.kind is EntryKind.MODEL_RESPONSE]
    responses = [content["content"] for content in said]
    assert responses == [ANSWER], "the retried call's answer, whole"
    assert handle.state.submissions["r1"].answer == ANSWER


async def test_the_event_stream_and_watch_show_previews_before_the_answer(
    tmp_path: Path,
) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    await SessionClient(store).submit("s1", "r1", "tell me")
    script = Script.model_validate(
        {"model": "m", "turns": [{"content": ANSWER, "stream_pause": PAUSE}]}
    )
    app = create_app(store=store, wakes=RecordingWakes(), token=SecretStr(TOKEN), streams=FAST)
    seen: list[StreamItem] = []
    async with serve(scripted_app(script, token="t")) as model_url, serve(app) as api_url:
        settings = WorkerSettings(
            store_url=store.backend.description,
            session_id="s1",
            model=ModelSettings(
                base_url=f"{model_url}/v1", api_key=SecretStr("t"), model="m", stream=True
            ),
        )
        worker = asyncio.ensure_future(run_worker(settings))
        client = SessionApiClient(api_url, TOKEN)
        async with client, aclosing(client.follow("s1")) as items:
            async for item in items:
                seen.append(item)
                final = any(s.status.is_final for s in getattr(item, "submissions", []))
                if isinstance(item, CommitEvent) and final:
                    break
        await worker
    await store.close()

    shown = [item for item in seen if isinstance(item, PreviewView)]
    texts = [p.text for p in shown if not p.removed]
    assert len(texts) >= 2 and all(ANSWER.startswith(t) for t in texts), texts
    assert all(p.preview for p in shown) and shown[-1].removed, "the answer removed it"
    view = seen[0]
    assert isinstance(view, SessionView)
    for item in seen[1:]:
        if isinstance(item, PreviewView):
            view = with_preview(view, item)
            if not item.removed:
                assert view.previews[0].text == item.text
                assert "not an answer" in render_text(view)
        else:
            assert isinstance(item, CommitEvent)
            view = merge(view, item)
    assert view.previews == [] and view.submissions[0].answer == ANSWER


def render_text(view: SessionView) -> str:
    console = Console(width=200, record=True)
    console.print(render(view))
    return console.export_text()


def test_the_preview_rate_is_a_setting() -> None:
    env = {
        "BH_MODEL_BASE_URL": "http://127.0.0.1:1/v1",
        "BH_MODEL_API_KEY": "k",
        "BH_MODEL_NAME": "m",
        "BH_MODEL_PREVIEW_MS": "100",
        "BH_MODEL_PREVIEW_CHARS": "500",
    }
    settings = ModelSettings.from_env(environ={**os.environ, **env})
    assert settings.preview_interval.total_seconds() == 0.1 and settings.preview_chars == 500
