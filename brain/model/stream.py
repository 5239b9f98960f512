"""Chat completions as Server-Sent Events (``"stream": true``), both ways.

``chunks`` cuts a whole completion into the chunks an OpenAI-compatible server streams
(the scripted model serves them); ``Assembly`` puts streamed chunks back together into
one completion (the client reads them). A stream that ends before ``data: [DONE]`` is
incomplete: the client treats the call as failed, never as a shorter answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

DONE: Final = "[DONE]"
#: tool-call arguments are streamed in pieces of this many characters
ARGUMENT_PIECE: Final = 16


def chunks(completion: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The chunks of ``completion`` (one choice): the role, the content word by word,
    each tool call (id and name, then its arguments in pieces), the finish reason, and
    last the usage (with ``choices: []``, as OpenAI sends it)."""
    head = {key: completion[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant"})
    content = message.get("content") or ""
    words = content.split(" ")
    for n, word in enumerate(words):
        if content:
            yield chunk({"content": word if n == 0 else " " + word})
    for position, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": position,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        arguments = function["arguments"]
        for start in range(0, len(arguments), ARGUMENT_PIECE):
            piece = arguments[start : start + ARGUMENT_PIECE]
            yield chunk({"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
    yield chunk({}, choice["finish_reason"])
    yield {**head, "choices": [], "usage": completion["usage"]}


def event(data: dict[str, Any] | str) -> bytes:
    """One SSE event carrying ``data``."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


@dataclass
class Assembly:
    """Streamed chunks put back together; ``on_text`` hears each piece of content."""

    on_text: Callable[[str], None] | None = None
    done: bool = False
    model: str = ""
    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    def feed(self, line: str) -> None:
        """One line of the event stream (``data: …``; other lines are ignored)."""
        if not line.startswith("data:"):
            return
        data = line[len("data:") :].strip()
        if data == DONE:
            self.done = True
            return
        chunk = json.loads(data)
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self.content.append(delta["content"])
            if self.on_text is not None:
                self.on_text(delta["content"])
        for call in delta.get("tool_calls") or ():
            known = self.calls.setdefault(
                call.get("index", 0), {"id": "", "name": "", "arguments": ""}
            )
            function = call.get("function") or {}
            known["id"] = call.get("id") or known["id"]
            known["name"] = function.get("name") or known["name"]
            known["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def completion(self) -> dict[str, Any]:
        """The whole completion, shaped as a non-streamed answer."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content) if self.content else None,
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for _, call in sorted(self.calls.items())
            ]
        return {
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }
