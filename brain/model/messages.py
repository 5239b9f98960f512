"""What the Brain says to a model and what it gets back, independent of any provider."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from contracts.model import Frozen

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(Frozen):
    """One function call requested by the model.

    ``arguments`` is the raw JSON text the model produced. It may be malformed; checking it
    against the tool's schema is the caller's job, so a bad call can be answered in-band.
    """

    id: str
    name: str
    arguments: str


class ChatMessage(Frozen):
    """One message of a conversation in chat-completions form."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _fits_role(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role!r}")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("tool_call_id is required on tool messages and allowed only there")
        return self


class ToolSchema(Frozen):
    """A tool the model may call: its name, what it does, and the JSON Schema of its args."""

    name: str
    description: str = ""
    parameters: dict[str, Any]


class ModelReply(Frozen):
    """The model's answer to one completion request."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    model: str = ""
    usage: dict[str, int] = Field(default_factory=dict)
    #: what the call cost by the configured prices (None: no prices configured)
    cost: float | None = None
