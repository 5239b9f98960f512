"""OpenAI-compatible chat-completions client (OpenAI, vLLM, Ollama, DashScope/Qwen, DeepSeek).

One HTTP attempt per call. httpx errors and HTTP statuses are translated here, and only here,
into the project's error tree:

- timeout, connection failure, 429, 5xx, or a 200 whose body is not a completion
  → ``ModelUnavailable`` (retryable; ``details["status"]`` holds the HTTP status if any,
  ``details["retry_after"]`` the seconds a ``Retry-After`` header asked for);
- any other non-200 status → ``ModelRejected`` with the server's message, truncated.

The API key is sent only in the ``Authorization`` header and never appears in errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from brain.model.estimate import estimate
from brain.model.messages import ChatMessage, ModelReply, ToolCall, ToolSchema
from brain.model.settings import ModelSettings
from brain.model.stream import Assembly
from contracts.errors import ModelRejected, ModelUnavailable
from contracts.usage import Usage

MAX_ERROR_TEXT = 500
#: model requests in flight from one client when its settings do not say (httpx's own)
DEFAULT_CONNECTIONS = 100


class OpenAIChatClient:
    """``ModelClient`` over ``POST {base_url}/chat/completions``."""

    def __init__(
        self, settings: ModelSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._settings = settings
        self._url = settings.base_url.rstrip("/") + "/chat/completions"
        pool = settings.max_connections or DEFAULT_CONNECTIONS
        self._http = httpx.AsyncClient(
            timeout=settings.timeout.total_seconds(),
            transport=transport,
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSchema] = (),
        request_id: str,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        """Send the conversation once and return the model's reply; ``on_text`` hears
        each piece of the answer's text as it streams in (with ``stream`` set)."""
        payload = self._payload(messages, tools)
        if self._settings.stream:
            reply = await self._streamed(payload, request_id, on_text)
        else:
            response = await self._post(payload, request_id)
            self._check_status(response, request_id)
            reply = _parse_reply(response, request_id)
        if self._settings.prices is None:
            return reply
        cost = Usage.of_call(reply.usage, self._settings.prices).cost
        return reply.model_copy(update={"cost": cost})

    def estimate(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Usage:
        """What a call may use at most: its answer at ``max_tokens`` (else the
        settings' ``output_estimate``), its cost at the settings' prices."""
        settings = self._settings
        output = settings.max_tokens or settings.output_estimate
        return estimate(messages, tools, output_tokens=output, prices=settings.prices)

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self._settings.model,
            "messages": [_wire_message(message) for message in messages],
        }
        if tools:
            payload["tools"] = [_wire_tool(tool) for tool in tools]
        if self._settings.temperature is not None:
            payload["temperature"] = self._settings.temperature
        if self._settings.max_tokens is not None:
            payload["max_tokens"] = self._settings.max_tokens
        return payload

    async def _streamed(
        self, payload: dict[str, Any], request_id: str, on_text: Callable[[str], None] | None
    ) -> ModelReply:
        """The answer as Server-Sent Events, put back together; a stream that ends
        before ``[DONE]`` is a failed call (``ModelUnavailable``), never a short answer."""
        payload = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        assembly = Assembly(on_text=on_text)
        try:
            async with self._http.stream(
                "POST", self._url, json=payload, headers=self._headers(request_id)
            ) as response:
                if not response.is_success:
                    await response.aread()
                    self._check_status(response, request_id)
                async for line in response.aiter_lines():
                    assembly.feed(line)
        except httpx.TimeoutException as exc:
            raise self._unavailable("timed out", exc, request_id) from exc
        except httpx.RequestError as exc:  # the connection dropped mid-stream, too
            raise self._unavailable("failed", exc, request_id) from exc
        except ValueError as exc:
            raise _malformed(request_id, f"a chunk is not JSON ({exc})") from None
        if not assembly.done:
            raise ModelUnavailable(
                "the model's stream ended before [DONE]: the answer is incomplete",
                **self._where(request_id),
            )
        return _reply_of(assembly.completion(), request_id)

    def _unavailable(self, what: str, exc: Exception, request_id: str) -> ModelUnavailable:
        return ModelUnavailable(
            f"model request {what} ({type(exc).__name__}: {exc})", **self._where(request_id)
        )

    def _headers(self, request_id: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._settings.api_key.get_secret_value()}",
            "X-Request-Id": request_id,
        }

    async def _post(self, payload: dict[str, Any], request_id: str) -> httpx.Response:
        headers = self._headers(request_id)
        try:
            return await self._http.post(self._url, json=payload, headers=headers)
        except httpx.TimeoutException as exc:
            seconds = self._settings.timeout.total_seconds()
            raise ModelUnavailable(
                f"model request timed out after {seconds:g}s ({type(exc).__name__})",
                **self._where(request_id),
            ) from exc
        except httpx.RequestError as exc:
            raise ModelUnavailable(
                f"model server connection failed ({type(exc).__name__}: {exc})",
                **self._where(request_id),
            ) from exc

    def _check_status(self, response: httpx.Response, request_id: str) -> None:
        if response.is_success:
            return
        status = response.status_code
        where = {**self._where(request_id), "status": status}
        text = self._error_text(response)
        wait = retry_after(response.headers.get("retry-after"), response.headers.get("date"))
        if wait is not None:
            where["retry_after"] = wait
        if status == 429:
            raise ModelUnavailable(f"model server is rate limiting (HTTP 429): {text}", **where)
        if status >= 500:
            raise ModelUnavailable(f"model server error (HTTP {status}): {text}", **where)
        raise ModelRejected(f"model server rejected the request (HTTP {status}): {text}", **where)

    def _error_text(self, response: httpx.Response) -> str:
        text = _server_message(response)
        secret = self._settings.api_key.get_secret_value()
        if secret:
            text = text.replace(secret, "***")
        return text[:MAX_ERROR_TEXT]

    def _where(self, request_id: str) -> dict[str, Any]:
        return {"url": self._url, "model": self._settings.model, "request_id": request_id}


#: A server's Retry-After is honoured up to this many seconds.
MAX_RETRY_AFTER: Final = 3600.0


def retry_after(header: str | None, date: str | None = None) -> float | None:
    """Seconds a Retry-After header asks to wait, bounded by ``MAX_RETRY_AFTER``: its
    delta-seconds, or its HTTP date less the response's own ``Date`` — both the server's
    clock, never compared with this host's (invariant 17). None when absent, unreadable,
    or a date without a ``Date`` to read it against (the caller's own backoff applies)."""
    if header is None or not header.strip():
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        moment, sent = _http_date(text), _http_date(date)
        if moment is None or sent is None:
            return None
        seconds = (moment - sent).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _http_date(text: str | None) -> datetime | None:
    """An HTTP date with its zone; None if absent or unreadable."""
    if not text:
        return None
    try:
        moment = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else None


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role != "assistant" and message.content is None:
        wire["content"] = ""
    if message.tool_calls:
        wire["tool_calls"] = [_wire_tool_call(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _wire_tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _wire_tool(tool: ToolSchema) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _server_message(response: httpx.Response) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the raw body text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return response.text.strip()


# Wire shapes of a chat.completion response. Providers add fields freely, so extra fields are
# ignored here (unlike the project's own frozen contracts).


class _WireFunction(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    arguments: str

    @field_validator("arguments", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        # A few servers send the arguments as a JSON object instead of JSON text.
        return value if isinstance(value, str) else json.dumps(value)


class _WireToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    function: _WireFunction


class _WireMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: str | None = None
    tool_calls: list[_WireToolCall] | None = None


class _WireChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    message: _WireMessage
    finish_reason: str | None = None


class _WireCompletion(BaseModel):
    model_config = ConfigDict(extra="ignore")

    choices: list[_WireChoice]
    model: str = ""
    usage: dict[str, Any] | None = None


def _parse_reply(response: httpx.Response, request_id: str) -> ModelReply:
    try:
        completion = _WireCompletion.model_validate_json(response.content)
    except ValidationError as exc:
        raise _malformed(request_id, f"{exc.error_count()} validation error(s)") from None
    return _reply(completion, request_id)


def _reply_of(assembled: dict[str, Any], request_id: str) -> ModelReply:
    try:
        completion = _WireCompletion.model_validate(assembled)
    except ValidationError as exc:
        raise _malformed(request_id, f"{exc.error_count()} validation error(s)") from None
    return _reply(completion, request_id)


def _reply(completion: _WireCompletion, request_id: str) -> ModelReply:
    if not completion.choices:
        raise _malformed(request_id, "no choices")
    choice = completion.choices[0]
    return ModelReply(
        content=choice.message.content,
        tool_calls=tuple(
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
            for call in choice.message.tool_calls or ()
        ),
        finish_reason=choice.finish_reason or "stop",
        model=completion.model,
        usage=_counts(completion.usage or {}),
    )


def _counts(usage: dict[str, Any]) -> dict[str, int]:
    # Providers nest detail objects in usage; the top-level token counts are kept, and
    # the cached prompt tokens (OpenAI's prompt_tokens_details.cached_tokens).
    counts = {
        key: value
        for key, value in usage.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool):
        counts["cached_tokens"] = cached
    return counts


def _malformed(request_id: str, reason: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"malformed response from model server: {reason}", request_id=request_id, status=200
    )
