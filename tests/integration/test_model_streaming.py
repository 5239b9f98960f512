"""Streamed answers (``"stream": true``), the client against the scripted model over
real HTTP: content and tool calls are put back together exactly as the unstreamed
answer, text is heard piece by piece as it arrives, usage comes in the last chunk, and
a stream cut before ``[DONE]`` is a failed call, never a shorter answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from brain.model.messages import ChatMessage, ModelReply
from brain.model.openai import OpenAIChatClient
from brain.model.scripted import Script, scripted_app
from brain.model.settings import ModelSettings
from brain.worker import WorkerSettings, run_worker
from contracts import ModelUnavailable
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve

HELLO = [ChatMessage(role="user", content="hello there")]


def script(**turn: object) -> Script:
    return Script.model_validate({"model": "m", "turns": [turn]})


async def ask(
    model: Script, *, stream: bool, on_text: Callable[[str], None] | None = None
) -> ModelReply:
    async with serve(scripted_app(model, token="t")) as url:
        settings = ModelSettings(
            base_url=f"{url}/v1", api_key=SecretStr("t"), model="m", stream=stream
        )
        async with OpenAIChatClient(settings) as client:
            return await client.complete(HELLO, request_id="r1", on_text=on_text)


async def test_a_streamed_answer_is_the_unstreamed_answer() -> None:
    model = script(
        content="All five notices went out as planned.",
        tool_calls=[{"name": "send", "arguments": {"to": ["ada@example.com", "alan@example.com"]}}],
    )
    heard: list[str] = []
    streamed = await ask(model, stream=True, on_text=heard.append)
    whole = await ask(model, stream=False)
    assert streamed.model_dump(exclude={"tool_calls"}) == whole.model_dump(exclude={"tool_calls"})
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        (c.name, c.arguments) for c in whole.tool_calls
    ]
    assert len(heard) == 7 and "".join(heard) == "All five notices went out as planned."
    assert streamed.usage["prompt_tokens"] == 2, "usage from the last chunk"


async def test_text_arrives_as_it_is_generated() -> None:
    model = script(content="one two three four", stream_pause=0.2)
    heard: list[tuple[float, str]] = []
    started = time.monotonic()
    await ask(model, stream=True, on_text=lambda piece: heard.append((time.monotonic(), piece)))
    assert "".join(piece for _, piece in heard) == "one two three four"
    assert heard[-1][0] - heard[0][0] >= 0.5, "pieces came spread over the pauses"
    assert heard[0][0] - started < heard[-1][0] - started - 0.4, "the first long before the last"


async def test_a_stream_cut_before_its_end_is_a_failed_call() -> None:
    heard: list[str] = []
    with pytest.raises(ModelUnavailable) as failed:
        cut = script(content="a long answer cut short", stream_cut_after=3)
        await ask(cut, stream=True, on_text=heard.append)
    assert "ended before [DONE]" in failed.value.message
    assert heard == ["a", " long"], "what streamed before the cut was heard, and not used"


async def test_the_agent_runs_on_streamed_answers(tmp_path: Path) -> None:
    model = Script.model_validate(
        {
            "model": "m",
            "turns": [
                {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
                {"content": "done: {last_tool_result}", "stream_pause": 0.01},
            ],
        }
    )
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    await SessionClient(store).submit("s1", "r1", "please echo")
    async with serve(scripted_app(model, token="t")) as url:
        settings = WorkerSettings(
            store_url=store.backend.description,
            session_id="s1",
            plugins=("tests.support.agent_plugins:plugin",),
            model=ModelSettings(
                base_url=f"{url}/v1", api_key=SecretStr("t"), model="m", stream=True
            ),
        )
        assert not (await run_worker(settings)).active
    answered = (await store.session("s1")).state.submissions["r1"]
    await store.close()
    assert str(answered.answer).startswith('done: {"echo": "x", "operation_id": "op-')
