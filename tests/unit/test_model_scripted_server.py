"""The scripted model server's own HTTP behaviour: auth, bad requests, script validation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from brain.model.scripted import Script, scripted_app
from contracts.errors import InvalidInput
from tests.support.http_server import serve

TOKEN = "scripted-token-5e8a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    script = Script.model_validate({"model": "demo", "turns": [{"content": "hi"}]})
    async with (
        serve(scripted_app(script, token=TOKEN)) as base_url,
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        yield client


async def test_both_completion_routes_answer_in_openai_shape(http: httpx.AsyncClient) -> None:
    request = {"model": "demo", "messages": [{"role": "user", "content": "hello"}]}
    bodies = [
        (await http.post(path, json=request, headers=AUTH)).json()
        for path in ("/v1/chat/completions", "/chat/completions")
    ]
    for body in bodies:
        assert body["object"] == "chat.completion"
        assert body["model"] == "demo"
        assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["usage"] == {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    assert bodies[0]["id"] != bodies[1]["id"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1]", "must be a JSON object"),
        (b'{"messages": [{"content": "no role"}]}', "'messages' must be a list"),
    ],
)
async def test_a_malformed_request_gets_400_with_a_clear_message(
    http: httpx.AsyncClient, content: bytes, message: str
) -> None:
    response = await http.post("/v1/chat/completions", content=content, headers=AUTH)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}])
async def test_completions_and_models_require_the_token(
    http: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    request = {"messages": [{"role": "user", "content": "hello"}]}
    completion = await http.post("/v1/chat/completions", json=request, headers=headers)
    models = await http.get("/v1/models", headers=headers)
    assert [completion.status_code, models.status_code] == [401, 401]
    assert completion.json()["error"]["type"] == "invalid_request_error"
    assert "nope" not in completion.text


async def test_models_lists_the_script_model_and_health_needs_no_token(
    http: httpx.AsyncClient,
) -> None:
    models = await http.get("/v1/models", headers=AUTH)
    health = await http.get("/healthz")
    assert [model["id"] for model in models.json()["data"]] == ["demo"]
    assert (health.status_code, health.json()) == (200, {"status": "ok"})


@pytest.mark.parametrize(
    ("turns", "problem"),
    [
        ([{"fail_first": 1}], "needs content, tool_calls, or both"),
        ([], "at least 1 item"),
        ([{"content": "x", "delay_seconds": -1}], "greater than or equal to 0"),
        ([{"tool_calls": [{"arguments": {}}]}], "turns.0.tool_calls.0.name"),
    ],
)
def test_an_invalid_script_file_is_refused_with_the_problem(
    tmp_path: Path, turns: list[object], problem: str
) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"turns": turns}))
    with pytest.raises(InvalidInput, match="is invalid") as caught:
        Script.load(path)
    assert problem in caught.value.message


def test_a_missing_script_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read script"):
        Script.load(tmp_path / "absent.json")


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "echo", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
                {"role": "tool", "tool_call_id": "a", "content": "ok"},
                {"role": "user", "content": "and?"},
            ],
            "did not have response messages: b",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
            ],
            "did not have response messages: a",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "tool", "tool_call_id": "z", "content": "from nowhere"},
            ],
            "must be a response to a preceding message with 'tool_calls'",
        ),
    ],
)
async def test_tool_calls_must_be_answered_as_the_real_apis_require(
    http: httpx.AsyncClient, messages: list[dict[str, object]], problem: str
) -> None:
    # Issue 6, defect 5: OpenAI-compatible servers reject a conversation in which an
    # assistant's tool call has no tool message answering it.
    response = await http.post("/v1/chat/completions", json={"messages": messages}, headers=AUTH)
    assert response.status_code == 400
    assert problem in response.json()["error"]["message"]
