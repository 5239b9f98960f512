"""A scripted model server speaking the OpenAI chat-completions HTTP API.

Tests and the offline demo point the real ``OpenAIChatClient`` at it. The script is a list of
turns; which turn answers is decided from the request alone (the number of assistant messages
already in the conversation), so a client that restarts and replays the conversation gets
the same answer again. Only the ``fail_first`` counters live in server memory.

Run it as a process::

    BH_SCRIPTED_MODEL_TOKEN=... python -m brain.model.scripted --script FILE --port N

Script file (JSON)::

    {"model": "scripted",
     "turns": [{"tool_calls": [{"name": "send_batch_emails", "arguments": {"to": ["a@x"]}}]},
               {"content": "All done: {last_tool_result}"}]}

In ``content``, ``{last_tool_result}`` and ``{last_user_message}`` stand for the last
tool message and the last user message of the request.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import random
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from brain.model.serving import run_app
from brain.model.stream import DONE, chunks, event
from contracts.errors import InvalidInput
from contracts.model import Frozen

TOKEN_VAR = "BH_SCRIPTED_MODEL_TOKEN"
LAST_TOOL_RESULT = "{last_tool_result}"
LAST_USER_MESSAGE = "{last_user_message}"


class ScriptedToolCall(Frozen):
    """A tool call the scripted model makes; object arguments are sent as JSON text."""

    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = Field(default_factory=dict)

    def arguments_text(self) -> str:
        # A string is sent verbatim, so a script can also produce malformed arguments.
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


class Turn(Frozen):
    """One scripted assistant message, optionally preceded by failures or a delay.

    The first ``fail_first`` requests that reach this turn get HTTP ``fail_status`` (503,
    or 429) at once (counted in server memory), with ``Retry-After: retry_after`` when
    given; a request that is answered waits ``delay_seconds`` first. A request with
    ``"stream": true`` is answered as Server-Sent Events (``brain.model.stream``).
    """

    content: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    fail_first: int = Field(default=0, ge=0)
    fail_status: Literal[429, 503] = 503
    retry_after: float | None = Field(default=None, ge=0)
    #: streamed answers (``"stream": true``): seconds between chunks, and a connection
    #: that ends after this many chunks (a mid-stream disconnect), for the first
    #: ``stream_cut_times`` streams of this turn (None: every one)
    stream_pause: float = Field(default=0.0, ge=0)
    stream_cut_after: int | None = Field(default=None, ge=0)
    stream_cut_times: int | None = Field(default=None, ge=1)
    delay_seconds: float = Field(default=0.0, ge=0)
    #: when set, each answered request waits a random time between ``delay_seconds``
    #: and this (a model's latency spread, for load tests)
    delay_max_seconds: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _says_something(self) -> Turn:
        if self.content is None and not self.tool_calls:
            raise ValueError("a turn needs content, tool_calls, or both")
        return self


class Script(Frozen):
    """The whole scripted conversation, one turn per assistant message."""

    model: str = "scripted"
    turns: tuple[Turn, ...] = Field(min_length=1)

    @classmethod
    def load(cls, path: Path) -> Script:
        try:
            return cls.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise InvalidInput(f"cannot read script {path}: {exc.strerror}") from None
        except ValidationError as exc:
            raise InvalidInput(f"script {path} is invalid: {_describe(exc)}") from None


class ReceivedRequest(Frozen):
    """A completion request as the server saw it, for tests to inspect."""

    request_id: str | None
    body: dict[str, Any]


class ScriptedModel:
    """State of one scripted server: script, token, failures served per turn, requests seen."""

    def __init__(self, script: Script, *, token: str) -> None:
        self.script = script
        self.received: list[ReceivedRequest] = []
        self._token = token
        self._failures: dict[int, int] = {}
        self._cuts: dict[int, int] = {}
        #: each streamed piece of content as it left: (``time.monotonic()``, characters
        #: of content sent so far), for measuring how long text takes to reach a reader
        self.streamed: deque[tuple[float, int]] = deque(maxlen=100_000)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/chat/completions", self._complete, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/healthz", _health, methods=["GET"]),
            ]
        )

    async def _complete(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "invalid or missing API key", "invalid_request_error")
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        messages = _message_list(body.get("messages"))
        if messages is None:
            return _error(400, "'messages' must be a list of objects with a 'role' string")
        problem = _tool_call_problem(messages)
        if problem is not None:
            return _error(400, problem)
        self.received.append(
            ReceivedRequest(request_id=request.headers.get("x-request-id"), body=body)
        )
        return await self._answer(messages, stream=body.get("stream") is True)

    async def _answer(self, messages: list[dict[str, Any]], *, stream: bool = False) -> Response:
        index = sum(1 for message in messages if message["role"] == "assistant")
        if index >= len(self.script.turns):
            return _error(
                409,
                f"script exhausted: the conversation has {index} assistant messages, "
                f"the script only {len(self.script.turns)} turns",
                "script_exhausted",
            )
        turn = self.script.turns[index]
        served = self._failures.get(index, 0)
        if served < turn.fail_first:
            self._failures[index] = served + 1
            failed = _error(
                turn.fail_status,
                f"scripted failure {served + 1} of {turn.fail_first} for turn {index}",
            )
            if turn.retry_after is not None:
                failed.headers["Retry-After"] = f"{turn.retry_after:g}"
            return failed
        await asyncio.sleep(_delay(turn))
        completion = _completion(self.script.model, index, turn, messages)
        if stream:
            cut = self._cuts.get(index, 0)
            self._cuts[index] = cut + 1
            if turn.stream_cut_times is not None and cut >= turn.stream_cut_times:
                turn = turn.model_copy(update={"stream_cut_after": None})
            return StreamingResponse(
                _streamed(completion, turn, self.streamed), media_type="text/event-stream"
            )
        return JSONResponse(completion)

    async def _models(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "invalid or missing API key", "invalid_request_error")
        model = {"id": self.script.model, "object": "model", "created": 0, "owned_by": "scripted"}
        return JSONResponse({"object": "list", "data": [model]})

    def _authorized(self, request: Request) -> bool:
        presented = request.headers.get("authorization", "")
        return hmac.compare_digest(presented.encode(), f"Bearer {self._token}".encode())


def _delay(turn: Turn) -> float:
    """Seconds this request waits before it is answered."""
    if turn.delay_max_seconds is None or turn.delay_max_seconds <= turn.delay_seconds:
        return turn.delay_seconds
    return random.uniform(turn.delay_seconds, turn.delay_max_seconds)


def scripted_app(script: Script, *, token: str) -> Starlette:
    """The scripted model server as an ASGI app (for ``tests/support/http_server.serve``)."""
    return ScriptedModel(script, token=token).app()


def _completion(
    model: str, index: int, turn: Turn, messages: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": _content(turn, messages)}
    tool_calls = [
        {
            "id": f"call_{index}_{position}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_text()},
        }
        for position, call in enumerate(turn.tool_calls)
    ]
    if tool_calls:
        message["tool_calls"] = tool_calls
    prompt_tokens = sum(_words(m.get("content")) for m in messages)
    completion_tokens = _words(message["content"]) + sum(
        _words(f"{c.name} {c.arguments_text()}") for c in turn.tool_calls
    )
    return {
        "id": f"chatcmpl-scripted-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def _streamed(
    completion: dict[str, Any], turn: Turn, sent: deque[tuple[float, int]]
) -> AsyncIterator[bytes]:
    """The completion as Server-Sent Events, ``stream_pause`` seconds apart; with
    ``stream_cut_after`` the connection ends after that many chunks, without [DONE]."""
    chars = 0
    for number, chunk in enumerate(chunks(completion)):
        if turn.stream_cut_after is not None and number >= turn.stream_cut_after:
            return
        if number and turn.stream_pause:
            await asyncio.sleep(turn.stream_pause)
        piece = chunk["choices"][0]["delta"].get("content") if chunk.get("choices") else None
        yield event(chunk)
        if piece:
            chars += len(piece)
            sent.append((time.monotonic(), chars))
    yield event(DONE)


def _content(turn: Turn, messages: Sequence[dict[str, Any]]) -> str | None:
    if turn.content is None:
        return None
    content = turn.content
    for placeholder, role in ((LAST_TOOL_RESULT, "tool"), (LAST_USER_MESSAGE, "user")):
        said = [m.get("content") for m in messages if m["role"] == role]
        last = said[-1] if said else ""
        content = content.replace(placeholder, last if isinstance(last, str) else "")
    return content


def _words(text: object) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def _tool_call_problem(messages: list[dict[str, Any]]) -> str | None:
    """What the real chat-completions APIs refuse: an assistant message with tool calls
    not followed by one tool message per call, or a tool message answering nothing."""
    open_calls: list[str] = []
    for message in [*messages, {"role": "end"}]:
        if message["role"] == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (tool_call_id {call_id!r})."
                )
            open_calls.remove(call_id)
            continue
        if open_calls:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not "
                f"have response messages: {', '.join(open_calls)}"
            )
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        open_calls = [str(call.get("id")) for call in calls or () if isinstance(call, dict)]
    return None


def _message_list(value: object) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value):
        return None
    return value


async def _json_object(request: Request) -> dict[str, Any] | Response:
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        return _error(400, f"request body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object")
    return body


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def _error(status: int, message: str, kind: str | None = None) -> JSONResponse:
    default = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind or default, "code": None}}, status_code=status
    )


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}"
        for error in exc.errors()
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brain.model.scripted",
        description=f"Scripted OpenAI-compatible model server (token from ${TOKEN_VAR}).",
    )
    parser.add_argument("--script", type=Path, required=True, help="script JSON file")
    parser.add_argument("--port", type=int, required=True, help="TCP port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_VAR, "")
    if not token:
        print(f"error: set {TOKEN_VAR} to the bearer token clients must send", file=sys.stderr)
        return 2
    try:
        script = Script.load(args.script)
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_app(scripted_app(script, token=token), host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
