"""Entries: the immutable history of a session's conversations."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, JsonValue

from contracts.blob import BlobRef
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow


class EntryKind(StrEnum):
    USER_INPUT = "user_input"
    MODEL_RESPONSE = "model_response"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    INTERRUPTION = "interruption"
    NOTE = "note"


class Entry(Frozen):
    """One immutable record in a conversation; large content lives in ``blob``."""

    id: Identifier
    kind: EntryKind
    conversation_id: Identifier = "main"
    content: JsonValue = None
    blob: BlobRef | None = None
    task_id: Identifier | None = None
    operation_id: Identifier | None = None
    created_at: AwareDatetime = Field(default_factory=utcnow)
