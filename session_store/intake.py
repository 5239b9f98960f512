"""Reading what a client submits: ids and input checked, with the field named when wrong.

A submission's input is either a message for the session's agent — a string or ``{"text":
"..."}`` — or a task to run directly, ``{"task": {"kind", "version", "input"}}``
(``contracts.SubmittedTask``). An answer to a question of a waiting task, ``{"answer":
{"question_id", "value", "by", "why"}}``, comes through its own door
(``SessionClient.answer``), which checks it against the question. The kernel, not the
client, chooses task ids and starting phases. The ingress refuses what it can check
(``InvalidInput``, nothing stored); the kernel reads stored input with the same rules
and fails the one submission it cannot turn into a task.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from contracts import (
    AnswerInput,
    Identifier,
    InvalidInput,
    PayloadTooLarge,
    RequestId,
    TaskInput,
    TextInput,
)

_REQUEST_ID: TypeAdapter[str] = TypeAdapter(RequestId)
_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)
_SHAPES = 'a string, {"text": "..."} or {"task": {"kind": ..., "version": ..., "input": ...}}'


def check_ids(request_id: Any, conversation_id: Any) -> None:
    """``InvalidInput`` naming the field when an id cannot be used."""
    _check(_REQUEST_ID, request_id, "request_id", "1-128 of A-Z a-z 0-9 . _ : @ -")
    _check(_IDENTIFIER, conversation_id, "conversation_id", "1-200 of A-Z a-z 0-9 . _ : @ -")


def read_input(value: JsonValue) -> str | TextInput | TaskInput | AnswerInput:
    """The stored input as one of the allowed shapes, or ``InvalidInput`` saying where
    it is wrong."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "answer" in value:
        answer = _read(AnswerInput, value, '{"answer": {"question_id", "value", "by", "why"?}}')
        assert isinstance(answer, AnswerInput)
        return answer
    if not isinstance(value, dict) or not ({"text", "task"} & value.keys()):
        raise InvalidInput(f"input must be {_SHAPES}", field="input")
    read = _read(TaskInput if "task" in value else TextInput, value, _SHAPES)
    assert isinstance(read, TextInput | TaskInput)
    return read


def read_work(value: JsonValue) -> str | TextInput | TaskInput:
    """Input that asks for work (not an answer): what the submissions door accepts. A
    message with nothing but whitespace in it is refused: it would run a whole turn of
    the agent on nothing."""
    read = read_input(value)
    if isinstance(read, AnswerInput):
        raise InvalidInput(
            "an answer to a question is submitted as an input (POST "
            "/v1/sessions/{id}/inputs, bh answer), where it is checked against the question",
            field="input",
        )
    text = read.text if isinstance(read, TextInput) else read
    if isinstance(text, str) and not text.strip():
        raise InvalidInput("the message is empty: there is nothing in it to act on", field="input")
    return read


def check_size(value: JsonValue, limit: int) -> None:
    """``PayloadTooLarge`` saying how large the input is and what fits (a message is
    stored twice in its commit: as the submission and as the conversation's entry)."""
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > limit:
        raise PayloadTooLarge(
            f"the input is {_size(size)}; this store takes at most {_size(limit)} of input "
            "per submission: send a large document as a file to a tool, or in parts",
            field="input",
            bytes=size,
            limit=limit,
        )


def input_limit(max_record_bytes: int) -> int:
    """The input one submission may carry under a store's record limit: it is stored
    twice in one commit, beside a few KB of bookkeeping."""
    return max(max_record_bytes // 4, (max_record_bytes - 8 * 1024) // 2)


def _size(count: int) -> str:
    return f"{count / 1_000_000:.1f} MB" if count >= 1_000_000 else f"{count / 1000:.0f} KB"


def _read(model: type[BaseModel], value: JsonValue, shapes: str) -> BaseModel:
    try:
        read = model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in ("input", *first["loc"]))
        raise InvalidInput(
            f"{where}: {first['msg']} (input must be {shapes})",
            field=where,
            problems=error.error_count(),
        ) from None
    return read


def _check(adapter: TypeAdapter[str], value: Any, field: str, allowed: str) -> None:
    try:
        adapter.validate_python(value)
    except ValidationError:
        raise InvalidInput(
            f"{field} {str(value)[:60]!r} is not allowed: use {allowed}, starting with a "
            "letter or digit",
            field=field,
        ) from None
