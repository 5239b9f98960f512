"""The OpenAI-compatible client over real HTTP, against the scripted model server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from brain.model import ChatMessage, ModelSettings, OpenAIChatClient, ToolCall, ToolSchema
from brain.model.scripted import Script, ScriptedModel
from contracts.errors import InvalidInput, ModelRejected, ModelUnavailable
from tests.support.http_server import free_port, serve

KEY = "sk-test-4b1d9e7c2a"
USER = ChatMessage(role="user", content="Send the five notification emails")
EMAIL_TOOL = ToolSchema(
    name="send_batch_emails",
    description="Send emails",
    parameters={"type": "object", "properties": {"to": {"type": "array"}}},
)


def settings(base_url: str, *, key: str = KEY, timeout: float = 5.0, **extra: Any) -> ModelSettings:
    return ModelSettings(
        base_url=base_url,
        api_key=SecretStr(key),
        model="test-model",
        timeout=timedelta(seconds=timeout),
        **extra,
    )


@asynccontextmanager
async def scripted(
    turns: list[dict[str, Any]], *, key: str = KEY, client_timeout: float = 5.0, **extra: Any
) -> AsyncIterator[tuple[ScriptedModel, OpenAIChatClient]]:
    model = ScriptedModel(Script.model_validate({"turns": turns}), token=KEY)
    async with (
        serve(model.app()) as base_url,
        OpenAIChatClient(
            settings(f"{base_url}/v1", key=key, timeout=client_timeout, **extra)
        ) as client,
    ):
        yield model, client


@asynccontextmanager
async def raw_server(status: int, body: bytes) -> AsyncIterator[OpenAIChatClient]:
    """A model server that answers every completion with ``status`` and ``body``."""

    async def answer(request: Request) -> Response:
        return Response(body, status_code=status, media_type="application/json")

    app = Starlette(routes=[Route("/chat/completions", answer, methods=["POST"])])
    async with serve(app) as base_url, OpenAIChatClient(settings(base_url)) as client:
        yield client


async def test_a_plain_answer_comes_back_with_model_and_usage() -> None:
    async with scripted([{"content": "Hello there"}]) as (_, client):
        reply = await client.complete([USER], request_id="req-1")
    assert reply.content == "Hello there"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert reply.model == "scripted"
    assert reply.usage["completion_tokens"] == 2
    assert reply.usage["total_tokens"] == reply.usage["prompt_tokens"] + 2


async def test_tool_calls_round_trip_with_ids_names_and_raw_arguments() -> None:
    turn = {
        "tool_calls": [
            {"name": "send_batch_emails", "arguments": {"to": ["a@example.com"]}},
            {"name": "lookup", "arguments": '{"broken": '},
        ]
    }
    async with scripted([turn]) as (_, client):
        reply = await client.complete([USER], tools=[EMAIL_TOOL], request_id="req-1")
    assert reply.content is None
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall(id="call_0_0", name="send_batch_emails", arguments='{"to": ["a@example.com"]}'),
        ToolCall(id="call_0_1", name="lookup", arguments='{"broken": '),
    )


async def test_the_request_carries_model_tools_options_and_request_id() -> None:
    async with scripted([{"content": "ok"}], temperature=0.2, max_tokens=64) as (model, client):
        await client.complete([USER], tools=[EMAIL_TOOL], request_id="task-7/attempt-3")
    [received] = model.received
    assert received.request_id == "task-7/attempt-3"
    assert received.body["model"] == "test-model"
    assert received.body["temperature"] == 0.2
    assert received.body["max_tokens"] == 64
    assert received.body["messages"] == [{"role": "user", "content": USER.content}]
    assert received.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "send_batch_emails",
                "description": "Send emails",
                "parameters": EMAIL_TOOL.parameters,
            },
        }
    ]


async def test_without_tools_or_options_none_are_sent() -> None:
    async with scripted([{"content": "ok"}]) as (model, client):
        await client.complete([USER], request_id="req-1")
    assert not {"tools", "temperature", "max_tokens"} & model.received[0].body.keys()


async def test_assistant_and_tool_messages_sent_back_produce_the_next_turn() -> None:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "send_batch_emails", "arguments": {"count": 5}}]},
        {"content": "All done: {last_tool_result}"},
    ]
    async with scripted(turns) as (model, client):
        first = await client.complete([USER], tools=[EMAIL_TOOL], request_id="req-1")
        [call] = first.tool_calls
        conversation = [
            USER,
            ChatMessage(role="assistant", tool_calls=first.tool_calls),
            ChatMessage(role="tool", tool_call_id=call.id, content="5 of 5 sent"),
        ]
        second = await client.complete(conversation, tools=[EMAIL_TOOL], request_id="req-2")
    assert second.content == "All done: 5 of 5 sent"
    assert second.finish_reason == "stop"
    assistant, tool = model.received[1].body["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "send_batch_emails", "arguments": '{"count": 5}'},
            }
        ],
    }
    assert tool == {"role": "tool", "content": "5 of 5 sent", "tool_call_id": "call_0_0"}


async def test_a_replayed_conversation_gets_the_same_answer() -> None:
    turns = [{"content": "first"}, {"content": "second"}]
    async with scripted(turns) as (_, client):
        conversation = [USER, ChatMessage(role="assistant", content="first"), USER]
        replies = [await client.complete(conversation, request_id="req-2") for _ in range(2)]
    assert [reply.content for reply in replies] == ["second", "second"]


@pytest.mark.parametrize(
    ("tool_results", "expected"),
    [([], "Result: []"), (["one", "two"], "Result: [two]")],
)
async def test_last_tool_result_is_templated_into_content(
    tool_results: list[str], expected: str
) -> None:
    calls = tuple(
        ToolCall(id=f"call_{i}", name="echo", arguments="{}") for i in range(len(tool_results))
    )
    conversation = [
        USER,
        ChatMessage(role="assistant", content=None if calls else "thinking", tool_calls=calls),
        *(
            ChatMessage(role="tool", tool_call_id=call.id, content=result)
            for call, result in zip(calls, tool_results, strict=True)
        ),
    ]
    turns = [{"content": "calling"}, {"content": "Result: [{last_tool_result}]"}]
    async with scripted(turns) as (_, client):
        reply = await client.complete(conversation, request_id="req-1")
    assert reply.content == expected


async def test_fail_first_gives_model_unavailable_then_the_answer() -> None:
    async with scripted([{"content": "finally", "fail_first": 2}]) as (_, client):
        failures = []
        for _ in range(2):
            with pytest.raises(ModelUnavailable) as caught:
                await client.complete([USER], request_id="req-1")
            failures.append(caught.value)
        reply = await client.complete([USER], request_id="req-1")
    assert [failure.details["status"] for failure in failures] == [503, 503]
    assert all(failure.retryable for failure in failures)
    assert reply.content == "finally"


async def test_a_wrong_key_is_rejected_without_revealing_any_key() -> None:
    wrong = "sk-wrong-91c0ffee"
    async with scripted([{"content": "never"}], key=wrong) as (_, client):
        with pytest.raises(ModelRejected) as caught:
            await client.complete([USER], request_id="req-1")
    error = caught.value
    assert error.details["status"] == 401
    assert not error.retryable
    text = f"{error} {error.details!r} {error.info().model_dump_json()}"
    assert "API key" in text
    assert wrong not in text
    assert KEY not in text


async def test_an_exhausted_script_is_rejected() -> None:
    async with scripted([{"content": "only turn"}]) as (_, client):
        conversation = [USER, ChatMessage(role="assistant", content="only turn"), USER]
        with pytest.raises(ModelRejected, match="script exhausted") as caught:
            await client.complete(conversation, request_id="req-2")
    assert caught.value.details["status"] == 409


@pytest.mark.parametrize(
    "body",
    [b"<html>not json", b'{"choices": []}', b'{"object": "chat.completion"}', b"[1, 2]"],
)
async def test_a_malformed_200_is_model_unavailable(body: bytes) -> None:
    async with raw_server(200, body) as client:
        with pytest.raises(ModelUnavailable, match="malformed response"):
            await client.complete([USER], request_id="req-1")


@pytest.mark.parametrize("status", [429, 500, 502])
async def test_rate_limits_and_server_errors_are_model_unavailable(status: int) -> None:
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    async with raw_server(status, body) as client:
        with pytest.raises(ModelUnavailable, match="slow down") as caught:
            await client.complete([USER], request_id="req-1")
    assert caught.value.details["status"] == status


async def test_a_client_error_is_rejected_with_the_server_message_truncated() -> None:
    message = "context length exceeded " + "x" * 2000
    async with raw_server(400, json.dumps({"error": {"message": message}}).encode()) as client:
        with pytest.raises(ModelRejected) as caught:
            await client.complete([USER], request_id="req-1")
    assert "context length exceeded" in caught.value.message
    assert len(caught.value.message) < 700
    assert caught.value.details["status"] == 400


async def test_a_slow_model_times_out_as_model_unavailable() -> None:
    async with scripted([{"content": "late", "delay_seconds": 0.6}], client_timeout=0.1) as (
        _,
        client,
    ):
        with pytest.raises(ModelUnavailable, match="timed out"):
            await client.complete([USER], request_id="req-1")


async def test_an_unreachable_server_is_model_unavailable() -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    async with OpenAIChatClient(settings(base_url)) as client:
        with pytest.raises(ModelUnavailable, match="connection failed"):
            await client.complete([USER], request_id="req-1")


def test_settings_come_from_the_environment_and_hide_the_key() -> None:
    environ = {
        "BH_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
        "BH_MODEL_API_KEY": KEY,
        "BH_MODEL_NAME": "qwen-plus",
    }
    loaded = ModelSettings.from_env(environ=environ)
    assert (loaded.base_url, loaded.model) == ("http://127.0.0.1:9/v1", "qwen-plus")
    assert loaded.api_key.get_secret_value() == KEY
    assert loaded.timeout == timedelta(seconds=60)
    assert KEY not in repr(loaded)
    assert KEY not in str(loaded)


def test_a_missing_setting_names_the_variable() -> None:
    with pytest.raises(InvalidInput, match="X_API_KEY is not set"):
        ModelSettings.from_env("X_", environ={"X_BASE_URL": "http://h/v1", "X_NAME": "m"})


def test_a_base_url_without_scheme_is_refused() -> None:
    environ = {
        "BH_MODEL_BASE_URL": "api.example.com",
        "BH_MODEL_API_KEY": "k",
        "BH_MODEL_NAME": "m",
    }
    with pytest.raises(InvalidInput, match="http:// or https://"):
        ModelSettings.from_env(environ=environ)


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "tool", "content": "result"},
        {"role": "user", "content": "hi", "tool_call_id": "call_0_0"},
        {"role": "user", "tool_calls": [{"id": "c", "name": "n", "arguments": "{}"}]},
    ],
)
def test_messages_that_do_not_fit_their_role_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ChatMessage.model_validate(fields)


def test_the_key_may_come_from_a_private_file(tmp_path: Path) -> None:
    """A mounted secret keeps the key out of the process environment (``/proc/*/environ``,
    crash dumps, ``docker inspect``); a file others may read is refused, and so is
    setting both (which one is meant?)."""
    key_file = tmp_path / "model.key"
    key_file.write_text(f"{KEY}\n")
    key_file.chmod(0o600)
    environ = {
        "BH_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
        "BH_MODEL_API_KEY_FILE": str(key_file),
        "BH_MODEL_NAME": "m",
    }
    assert ModelSettings.from_env(environ=environ).api_key.get_secret_value() == KEY
    with pytest.raises(InvalidInput, match="set one"):
        ModelSettings.from_env(environ={**environ, "BH_MODEL_API_KEY": KEY})
    key_file.chmod(0o644)
    with pytest.raises(InvalidInput, match="others may read"):
        ModelSettings.from_env(environ=environ)


@pytest.mark.parametrize(("max_connections", "peak"), [(None, 100), (110, 110)])
async def test_requests_in_flight_are_bounded_by_the_connection_pool_not_below_the_slots(
    max_connections: int | None, peak: int
) -> None:
    """One Brain of 1,000 slots never had more than 100 model requests in flight: httpx's
    default pool. ``max_connections`` (a Brain sets it to its slots) raises it."""
    flying, seen = 0, 0
    body = {
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }

    async def answer(request: Request) -> Response:
        nonlocal flying, seen
        flying += 1
        seen = max(seen, flying)
        await asyncio.sleep(0.5)
        flying -= 1
        return Response(json.dumps(body), media_type="application/json")

    app = Starlette(routes=[Route("/chat/completions", answer, methods=["POST"])])
    extra = {} if max_connections is None else {"max_connections": max_connections}
    async with serve(app) as base_url, OpenAIChatClient(settings(base_url, **extra)) as client:
        await asyncio.gather(*(client.complete([USER], request_id=f"r{n}") for n in range(120)))
    assert seen == peak
