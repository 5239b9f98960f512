"""The agent loop as built-in task kinds: model generation and tool calls.

``agent`` (one per submission) goes prepare → request → tools → prepare … :

* *request* calls the model outside any transaction. The model's response, the
  ``tool-call`` tasks it asks for and the wait on them are one commit. A request
  attempt that did not complete (crash, timeout) is recorded as an *interruption* and
  never used as a response.
* *tools* runs once every tool call has settled; their results are already entries.

``tool-call`` checks the call (known tool, JSON arguments, schema) and answers a bad
call in-band so the model can correct itself. Plain tools run as one operation with a
stable ``operation_id`` (``brain.operations``); composite tools run as a subtask of the
kind they name. Either way the tool-result entry, the task's terminal state and the
operation's "applied" mark land in one commit.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import JsonValue

from brain.context import PhaseContext
from brain.model.messages import ChatMessage, ToolCall, ToolSchema
from brain.outcome import Done, Effects, Fail, Next, PhaseOutcome, Retry, TaskSpec, Wait
from brain.registry import TaskKind
from brain.tools import validate_arguments
from contracts import (
    BlobRef,
    Entry,
    EntryKind,
    ErrorInfo,
    InvalidInput,
    ModelUnavailable,
    Outcome,
    ToolFailed,
)

AGENT = "agent"
TOOL_CALL = "tool-call"
CONFIG_DOCUMENT = "agent.config"
INLINE_OUTPUT_BYTES = 16 * 1024
PREVIEW_BYTES = 2 * 1024
DEFAULT_PROMPT = (
    "You are a careful assistant acting for an operator. Use the tools to act, "
    "then answer briefly with what was done."
)


def agent_kinds(*, max_rounds: int = 16) -> list[TaskKind]:
    async def prepare(ctx: PhaseContext) -> PhaseOutcome:
        round_ = ctx.memo_int("round") + 1
        if round_ > max_rounds:
            return Fail(error=ErrorInfo(code="too_many_rounds", message=f"over {max_rounds}"))
        return Next(phase="request", effects=Effects(memo={"round": round_}))

    return [
        TaskKind(
            AGENT, 1, {"prepare": prepare, "start": prepare, "request": _request, "tools": _tools}
        ),
        TaskKind(TOOL_CALL, 1, {"start": _check_call, "execute": _execute, "collect": _collect}),
    ]


async def _request(ctx: PhaseContext) -> PhaseOutcome:
    model = ctx.services.model
    if model is None:
        return Fail(error=ErrorInfo(code="no_model", message="this Brain has no model client"))
    conversation = str(ctx.input.get("conversation_id", "main"))
    round_ = ctx.memo_int("round", 1)
    prefix = f"{ctx.task.id}.r{round_}"
    interrupted = _interruptions(ctx, prefix, conversation)
    messages = [_system(ctx), *_messages(await ctx.conversation(conversation))]
    tools = [
        ToolSchema(name=spec.name, description=spec.description, parameters=spec.parameters)
        for spec in ctx.services.tools.specs()
    ]
    ctx.checkpoint("call:before:model")
    try:
        reply = await model.complete(messages, tools=tools, request_id=f"{prefix}.a{ctx.attempt}")
    except ModelUnavailable as error:
        note = _interruption(f"{prefix}.int{ctx.attempt}", conversation, ctx.attempt, error.message)
        return Retry(
            reason=error.message,
            effects=Effects(entries=(*interrupted, note), memo={"retried_attempt": ctx.attempt}),
        )
    ctx.checkpoint("call:after:model")
    calls = [(f"{prefix}.c{n}", call) for n, call in enumerate(reply.tool_calls)]
    response = Entry(
        id=f"{prefix}.response",
        kind=EntryKind.MODEL_RESPONSE,
        conversation_id=conversation,
        task_id=ctx.task.id,
        content={
            "content": reply.content,
            "tool_calls": [call.model_dump() for _, call in calls],
            "model": reply.model,
            "usage": dict(reply.usage),
        },
    )
    if not calls:
        return Done(result=reply.content, effects=Effects(entries=(*interrupted, response)))
    spawn = tuple(_tool_task(ctx, task_id, call, conversation) for task_id, call in calls)
    return Wait(
        tasks=tuple(spec.id for spec in spawn),
        next_phase="tools",
        effects=Effects(entries=(*interrupted, response), spawn=spawn),
    )


async def _tools(ctx: PhaseContext) -> PhaseOutcome:
    return Next(phase="prepare")


def _tool_task(ctx: PhaseContext, task_id: str, call: ToolCall, conversation: str) -> TaskSpec:
    return TaskSpec(
        id=task_id,
        kind=TOOL_CALL,
        input={
            "tool": call.name,
            "arguments": call.arguments,
            "call_id": call.id,
            "conversation_id": conversation,
            # Stable identity, frozen with the intent: recovery re-uses it, never a new one.
            "operation_id": f"{ctx.session_id}:{task_id}",
        },
    )


async def _check_call(ctx: PhaseContext) -> PhaseOutcome:
    name = str(ctx.input["tool"])
    spec = ctx.services.tools.spec(name)
    if spec is None:
        known = ", ".join(sorted(s.name for s in ctx.services.tools.specs())) or "none"
        return _answer_error(ctx, "unknown_tool", f"unknown tool {name!r}; available: {known}")
    try:
        arguments = json.loads(str(ctx.input["arguments"]) or "{}")
        args = validate_arguments(spec, arguments)
    except ValueError as error:
        return _answer_error(ctx, "invalid_arguments", f"arguments are not valid JSON: {error}")
    except InvalidInput as error:
        return _answer_error(ctx, "invalid_arguments", error.message)
    if spec.task_kind is not None:
        child = TaskSpec(id=f"{ctx.task.id}.run", kind=spec.task_kind, input=args)
        return Wait(tasks=(child.id,), next_phase="collect", effects=Effects(spawn=(child,)))
    return Next(phase="execute", effects=Effects(memo={"args": args}))


async def _execute(ctx: PhaseContext) -> PhaseOutcome:
    args: dict[str, Any] = dict(ctx.memo["args"])  # type: ignore[arg-type]
    operation_id = str(ctx.input["operation_id"])
    try:
        resolution = await ctx.operation(str(ctx.input["tool"]), args, operation_id)
    except (ToolFailed, InvalidInput) as error:
        # It definitely did not happen: tell the model. Anything else (outcome unknown,
        # parked, retryable) is the kernel's to handle.
        return _answer_error(ctx, error.code, error.message, applied=True)
    output, blob = await _keep_small(ctx, resolution.output)
    return Done(
        result={"output": output, "path": resolution.path},
        effects=Effects(
            entries=(_tool_result(ctx, ok=True, output=output, blob=blob),),
            applied_operations=(operation_id,),
        ),
    )


async def _keep_small(ctx: PhaseContext, output: JsonValue) -> tuple[JsonValue, BlobRef | None]:
    """Large tool output goes to a blob; the entry keeps a preview and the reference."""
    data = json.dumps(output).encode()
    if len(data) <= INLINE_OUTPUT_BYTES:
        return output, None
    blob = await ctx.services.store.put_blob(data, "application/json")
    preview = data[:PREVIEW_BYTES].decode(errors="ignore")
    return {"preview": preview, "truncated": True, "bytes": len(data), "blob": blob.digest}, blob


async def _collect(ctx: PhaseContext) -> PhaseOutcome:
    child = ctx.get_task(f"{ctx.task.id}.run")
    assert child is not None and child.is_terminal
    if child.outcome is Outcome.SUCCEEDED:
        return Done(
            result={"output": child.result, "path": "executed"},
            effects=Effects(
                entries=(_tool_result(ctx, ok=True, output=child.result),),
                applied_operations=(str(ctx.input["operation_id"]),),
            ),
        )
    error = child.error or ErrorInfo(code="tool_cancelled", message=child.reason or "cancelled")
    return _answer_error(ctx, error.code, error.message, applied=True)


def _answer_error(ctx: PhaseContext, code: str, message: str, *, applied: bool = False) -> Fail:
    """Fail the call, telling the model what was wrong in the tool result."""
    entry = _tool_result(ctx, ok=False, output={"code": code, "message": message})
    applied_ids = (str(ctx.input["operation_id"]),) if applied else ()
    return Fail(
        error=ErrorInfo(code=code, message=message),
        effects=Effects(entries=(entry,), applied_operations=applied_ids),
    )


def _tool_result(
    ctx: PhaseContext, *, ok: bool, output: JsonValue, blob: BlobRef | None = None
) -> Entry:
    return Entry(
        blob=blob,
        id=f"{ctx.task.id}.result",
        kind=EntryKind.TOOL_RESULT,
        conversation_id=str(ctx.input.get("conversation_id", "main")),
        task_id=ctx.task.id,
        operation_id=str(ctx.input["operation_id"]),
        content={
            "call_id": ctx.input["call_id"],
            "tool": ctx.input["tool"],
            "ok": ok,
            "output" if ok else "error": output,
        },
    )


def _interruptions(ctx: PhaseContext, prefix: str, conversation: str) -> tuple[Entry, ...]:
    """Attempts of this request that left no outcome: the process died during them."""
    if ctx.attempt <= 1 or ctx.memo_int("retried_attempt") == ctx.attempt - 1:
        return ()  # first attempt, or the previous one ended with a recorded error
    return (
        _interruption(
            f"{prefix}.int{ctx.attempt - 1}",
            conversation,
            ctx.attempt - 1,
            "the process running this request stopped before it completed",
        ),
    )


def _interruption(entry_id: str, conversation: str, attempt: int, why: str) -> Entry:
    return Entry(
        id=entry_id,
        kind=EntryKind.INTERRUPTION,
        conversation_id=conversation,
        content={"attempt": attempt, "why": why, "note": "no part of it is used as a response"},
    )


def _system(ctx: PhaseContext) -> ChatMessage:
    config = ctx.document(CONFIG_DOCUMENT)
    prompt = config.body.get("system_prompt", DEFAULT_PROMPT) if config else DEFAULT_PROMPT
    return ChatMessage(role="system", content=str(prompt))


def _messages(entries: list[Entry]) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for entry in entries:
        content: Any = entry.content
        if entry.kind is EntryKind.USER_INPUT:
            messages.append(ChatMessage(role="user", content=_text(content)))
        elif entry.kind is EntryKind.MODEL_RESPONSE:
            calls = tuple(ToolCall.model_validate(call) for call in content.get("tool_calls", ()))
            messages.append(
                ChatMessage(role="assistant", content=content.get("content"), tool_calls=calls)
            )
        elif entry.kind is EntryKind.TOOL_RESULT:
            body = content.get("output") if content.get("ok") else {"error": content.get("error")}
            messages.append(
                ChatMessage(role="tool", tool_call_id=str(content["call_id"]), content=_text(body))
            )
    return messages


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
