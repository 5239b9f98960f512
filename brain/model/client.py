"""The model client boundary: the one protocol every model adapter implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from brain.model.messages import ChatMessage, ModelReply, ToolSchema
from contracts.usage import Usage


class ModelClient(Protocol):
    """Asks a model for the next message of a conversation.

    One call is one attempt. Implementations raise ``contracts.ModelUnavailable`` when the
    same request may succeed later and ``contracts.ModelRejected`` when it will not.
    ``request_id`` identifies the attempt (stable across a replay of the same attempt) and is
    passed to the provider where it has a place for it. ``on_text`` hears each piece of
    the answer's text as it arrives, when the adapter streams. ``estimate`` says what a
    call with these messages may use at most, before it is made (``brain.model.estimate``:
    a budget or a shared token limit holds it for the call until the call's usage is
    known).
    """

    def estimate(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Usage: ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSchema] = (),
        request_id: str,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply: ...

    async def aclose(self) -> None: ...
