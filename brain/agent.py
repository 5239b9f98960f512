"""The agent loop as built-in task kinds: model generation and tool calls.

``agent`` (one per submission) goes prepare → request → tools → prepare … :

* *request* calls the model outside any transaction. The model's response, the
  ``tool-call`` tasks it asks for and the wait on them are one commit. Every attempt of
  a request that did not complete (crash, timeout, outage) is recorded once as an
  *interruption* and never used as a response.
* *tools* runs once every tool call has settled. A call that ended without a result
  entry (it failed, was cancelled, hit a limit, or its outcome was refused) is answered
  here with an error result, so the next request answers every tool call exactly once,
  as OpenAI-compatible APIs require.

``tool-call`` checks the call (known tool, JSON arguments, schema) and answers a bad
call in-band so the model can correct itself. A call that needs approval (the tool
declares it, or one of the Brain's ``ApprovalRule``s matches it) waits for a person's
decision before anything else: its intent is committed only once it is approved, so no
Hands can run it before; a denial is answered to the model as a tool error saying who
denied it and why. Plain tools run as one operation whose id
the kernel derives from the session and the call's task (``brain.operations``; input
cannot choose it); composite tools run as a subtask of the kind they name. Either way
the tool-result entry, the task's terminal state and the operation's "applied" mark
land in one commit. The output is kept once, in the entry (or a blob it references);
the task's result refers to it.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import JsonValue

from brain.context import CallInterrupted, PhaseContext
from brain.decide import INPUTS_SEEN
from brain.model.client import ModelClient
from brain.model.messages import ChatMessage, ModelReply, ToolCall, ToolSchema
from brain.outcome import Done, Effects, Fail, Next, PhaseOutcome, Retry, Sleep, TaskSpec, Wait
from brain.registry import TaskKind
from brain.tools import ToolSpec, validate_arguments
from contracts import (
    PROGRESS_DOCUMENT,
    BlobRef,
    Entry,
    EntryKind,
    ErrorInfo,
    InvalidInput,
    ModelRejected,
    ModelUnavailable,
    Outcome,
    PendingCall,
    Question,
    QuestionKind,
    StoreUnavailable,
    Task,
    ToolFailed,
)
from contracts.question import ApprovalRule
from contracts.usage import Budget, ModelUsage, Usage
from coordination.ratelimit import Admission

log = logging.getLogger(__name__)

AGENT = "agent"
TOOL_CALL = "tool-call"
CONFIG_DOCUMENT = "agent.config"
PREVIEW_BYTES = 2 * 1024
DEFAULT_PROMPT = (
    "You are a careful assistant acting for an operator. Use the tools to act, "
    "then answer briefly with what was done."
)


def agent_kinds(*, max_rounds: int = 16, approvals: Sequence[ApprovalRule] = ()) -> list[TaskKind]:
    """The agent's task kinds; ``approvals``: which calls need approval besides those
    whose tool declares it."""

    async def prepare(ctx: PhaseContext) -> PhaseOutcome:
        round_ = ctx.memo_int("round") + 1
        if round_ > max_rounds:
            return Fail(error=ErrorInfo(code="too_many_rounds", message=f"over {max_rounds}"))
        noted = _interrupted(ctx)
        memo: dict[str, JsonValue] = {"round": round_, "interrupted": None}
        return Next(phase="request", effects=Effects(entries=noted, memo=memo))

    async def check_call(ctx: PhaseContext) -> PhaseOutcome:
        return await _check_call(ctx, approvals)

    call_phases = {
        "start": check_call,
        "decided": _decided,
        "execute": _execute,
        "collect": _collect,
    }
    return [
        TaskKind(
            AGENT,
            1,
            {
                "prepare": prepare,
                "start": prepare,
                "request": _request,
                "tools": _tools,
                "budget": _budget,
            },
            # a new message may abandon a model call: the next round's request includes it
            interruptible={"request": "prepare"},
        ),
        TaskKind(TOOL_CALL, 1, call_phases),
    ]


async def _request(ctx: PhaseContext) -> PhaseOutcome:
    model = ctx.services.model
    if model is None:
        return Fail(error=ErrorInfo(code="no_model", message="this Brain has no model client"))
    conversation = str(ctx.input.get("conversation_id", "main"))
    round_ = ctx.memo_int("round", 1)
    waits = ctx.memo_int(RATE_WAITS)
    # a rate-limit wait re-enters this phase at attempt 1: fresh ids for its attempts
    prefix = f"{ctx.task.id}.r{round_}" + (f".w{waits}" if waits else "")
    history = await ctx.conversation(conversation)
    messages = [_system(ctx), *_messages(history)]
    tools = [
        ToolSchema(name=spec.name, description=spec.description, parameters=spec.parameters)
        for spec in ctx.services.tools.specs()
    ]
    estimate = model.estimate(messages, tools)
    over = await _within_budget(ctx, estimate)
    if over is not None:
        return over
    admission = await _admit(ctx, estimate.tokens)
    if admission is not None and not admission.admitted:
        return _sleep_for_window(ctx, admission.wait)
    interrupted = _interruptions(ctx, prefix, conversation, history)
    ctx.crash_point("call:before:model")
    try:
        reply = await _ask(ctx, model, messages, tools, f"{prefix}.a{ctx.attempt}", admission)
    except ModelUnavailable as error:
        streamed = ctx.previewed()
        note = _interruption(
            f"{prefix}.int{ctx.attempt}",
            conversation,
            ctx.attempt,
            error.message,
            preview={"text": streamed} if streamed else None,
        )
        # a server's Retry-After is a durable backoff: the task sleeps as pending, and
        # its Brain lets go of the session meanwhile
        wait = error.details.get("retry_after")
        delay = timedelta(seconds=float(wait)) if isinstance(wait, int | float) else None
        return Retry(
            reason=error.message, delay=delay, effects=Effects(entries=(*interrupted, note))
        )
    used = ModelUsage(
        model=reply.model or "unknown",
        usage=Usage.of_call(reply.usage).model_copy(update={"cost": reply.cost or 0.0}),
    )
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
        seen = {entry.id for entry in history}
        joined: list[JsonValue] = [r for r in ctx.joined_messages() if f"in.{r}" in seen]
        return Done(
            result=reply.content,
            effects=Effects(
                entries=(*interrupted, response), memo={INPUTS_SEEN: joined}, usage=used
            ),
        )
    spawn = tuple(_tool_task(task_id, call, conversation) for task_id, call in calls)
    return Wait(
        tasks=tuple(spec.id for spec in spawn),
        next_phase="tools",
        effects=Effects(entries=(*interrupted, response), spawn=spawn, usage=used),
    )


async def _ask(
    ctx: PhaseContext,
    model: ModelClient,
    messages: list[ChatMessage],
    tools: list[ToolSchema],
    attempt: str,
    admission: Admission | None,
) -> ModelReply:
    """The model call, which a new message may abandon (policy interrupt) until it has
    answered; its reservation under the shared limits is settled to what it used."""
    try:
        reply = await ctx.interruptible(
            lambda: model.complete(
                messages, tools=tools, request_id=attempt, on_text=lambda p: ctx.preview(attempt, p)
            )
        )
    except CallInterrupted as stopped:
        if not stopped.started:  # never made: it used nothing
            await _settle(ctx, admission, 0)
        raise
    except (ModelRejected, ModelUnavailable) as error:
        # an HTTP error answered it (429, 5xx, 4xx): nothing was billed. Otherwise (a
        # timeout, a cut stream, a malformed 200) what it used is unknown: its estimate
        # stays charged
        status = error.details.get("status")
        if isinstance(status, int) and status >= 400:
            await _settle(ctx, admission, 0)
        raise
    ctx.crash_point("call:after:model")
    await _settle(ctx, admission, Usage.of_call(reply.usage).tokens)
    return reply


RATE_WAITS = "rate_waits"


async def _admit(ctx: PhaseContext, tokens: int) -> Admission | None:
    """Before a model call: ask the endpoint's shared limits (``coordination.ratelimit``)
    to admit a call of up to ``tokens``, reserved in this minute's window. None: no
    limits here, or Redis is away and the call goes ahead (the server's own 429 still
    backs it off)."""
    limits = ctx.services.limits
    if limits is None:
        return None
    try:
        return await limits.admit(tokens)
    except StoreUnavailable as error:
        log.warning("task %s: model limits not checked: %s", ctx.task.id, error.message)
        return None


def _sleep_for_window(ctx: PhaseContext, wait: float) -> Sleep:
    """The endpoint's limits are used up for this window: sleep until it ends (durably:
    the Brain lets go of the session), then ask again."""
    memo: dict[str, JsonValue] = {RATE_WAITS: ctx.memo_int(RATE_WAITS) + 1}
    until = ctx.now() + timedelta(seconds=wait + random.uniform(0, 1))  # spread the herd
    return Sleep(until=until, next_phase="request", effects=Effects(memo=memo))


async def _settle(ctx: PhaseContext, admission: Admission | None, tokens: int) -> None:
    """Correct the call's reservation to the ``tokens`` it used (0: none). Not
    settled (Redis away), the reservation stays charged at its estimate."""
    limits = ctx.services.limits
    if limits is None or admission is None:
        return
    try:
        await limits.settle(admission, tokens)
    except StoreUnavailable as error:
        log.warning("task %s: %d tokens not settled: %s", ctx.task.id, tokens, error.message)


BUDGET_EXTENSIONS = "budget_extensions"
#: memo: the usage (session's, task's) when someone last allowed one more budget's worth
BUDGET_SINCE = "budget_since"
GO_ON, STOP = "continue", "stop"


async def _within_budget(ctx: PhaseContext, estimate: Usage) -> PhaseOutcome | None:
    """Before a model call: admit it within the session's and this task's budgets, and
    hold its ``estimate`` against the session's (``brain.reservations``), or say what
    to do instead. A budget that the committed usage alone has reached fails the task or
    asks to go on; one that only the other agents' calls in flight would reach makes
    this call wait until one of them is settled, and then it is checked again."""
    while True:
        over = _over_budget(ctx)
        if over is not None:
            return over
        if _fits_beside_calls_in_flight(ctx):
            ctx.reserve(estimate)  # no await since the check: nobody passed it meanwhile
            return None
        await ctx.reservation_released()


def _fits_beside_calls_in_flight(ctx: PhaseContext) -> bool:
    """Whether the session's budget is not reached by its committed usage together with
    the other tasks' calls in flight, at their estimates."""
    budget = ctx.session_budget()
    if budget is None:
        return True
    used = ctx.session_usage().plus(ctx.reserved_by_others())
    return budget.reached(used, _since(ctx, "session")) is None


def _since(ctx: PhaseContext, key: str) -> Usage | None:
    """The usage (the session's, or the task's) when someone last allowed this task one
    more budget's worth; None: never."""
    since = ctx.memo.get(BUDGET_SINCE)
    if not isinstance(since, dict) or key not in since:
        return None
    return Usage.model_validate(since[key])


def _over_budget(ctx: PhaseContext) -> PhaseOutcome | None:
    """Before a model call: the session's or this task's budget is used up: fail, or
    ask whether to go on for one more budget's worth (``contracts.usage.Budget``)."""
    extensions = ctx.memo_int(BUDGET_EXTENSIONS)
    given = ctx.input.get("budget") if isinstance(ctx.input, dict) else None
    checks = [(ctx.session_budget(), ctx.session_usage(), "session", "the session's")]
    if given is not None:
        checks.append((Budget.model_validate(given), ctx.task.usage, "task", "this task's"))
    for budget, used, key, whose in checks:
        reached = budget.reached(used, _since(ctx, key)) if budget else None
        if budget is None or reached is None:
            continue
        said = f"{whose} model budget is used up: {reached}"
        if budget.on_exceed == "fail":
            return Fail(error=ErrorInfo(code="budget_exceeded", message=said))
        question = Question(
            id=f"budget.{ctx.task.id}.{extensions + 1}",
            prompt=f"{said}. Go on for one more budget's worth?",
            kind=QuestionKind.CHOICE,
            choices=(GO_ON, STOP),
            queue="budgets",
        )
        return Wait(question=question, next_phase="budget", reason=said)
    return None


async def _budget(ctx: PhaseContext) -> PhaseOutcome:
    """Someone decided whether the task may use one more budget's worth from here."""
    extensions = ctx.memo_int(BUDGET_EXTENSIONS) + 1
    decision = ctx.answer(f"budget.{ctx.task.id}.{extensions}")
    if decision.value != GO_ON:
        why = f": {decision.why}" if decision.why else ""
        message = f"stopped at its model budget by {decision.by}{why}"
        return Fail(error=ErrorInfo(code="budget_exceeded", message=message))
    since: dict[str, JsonValue] = {
        "session": ctx.session_usage().model_dump(mode="json"),
        "task": ctx.task.usage.model_dump(mode="json"),
    }
    memo: dict[str, JsonValue] = {BUDGET_EXTENSIONS: extensions, BUDGET_SINCE: since}
    return Next(phase="request", effects=Effects(memo=memo))


async def _tools(ctx: PhaseContext) -> PhaseOutcome:
    """Every call of this round has settled: answer, with an error, any that left no
    result entry, so that the next request answers each of the model's calls."""
    conversation = str(ctx.input.get("conversation_id", "main"))
    answered = {
        entry.content.get("call_id")
        for entry in await ctx.conversation(conversation)
        if entry.kind is EntryKind.TOOL_RESULT and isinstance(entry.content, dict)
    }
    missing = tuple(
        _unanswered(call, conversation)
        for call in ctx.children()
        if call.kind == TOOL_CALL and call.is_terminal and _call_id(call) not in answered
    )
    return Next(phase="prepare", effects=Effects(entries=missing))


def _call_id(call: Task) -> object:
    return call.input.get("call_id") if isinstance(call.input, dict) else None


def _unanswered(call: Task, conversation: str) -> Entry:
    error = call.error or ErrorInfo(
        code="tool_cancelled" if call.outcome is Outcome.CANCELLED else "no_result",
        message=call.reason or f"the call ended {call.outcome} without a result",
    )
    given: Any = call.input
    return Entry(
        id=f"{call.id}.result",
        kind=EntryKind.TOOL_RESULT,
        conversation_id=conversation,
        task_id=call.id,
        content={
            "call_id": given["call_id"],
            "tool": given["tool"],
            "ok": False,
            "error": {"code": error.code, "message": error.message},
        },
    )


def _tool_task(task_id: str, call: ToolCall, conversation: str) -> TaskSpec:
    return TaskSpec(
        id=task_id,
        kind=TOOL_CALL,
        input={
            "tool": call.name,
            "arguments": call.arguments,
            "call_id": call.id,
            "conversation_id": conversation,
        },
    )


async def _check_call(ctx: PhaseContext, approvals: Sequence[ApprovalRule]) -> PhaseOutcome:
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
    rule = next((r for r in (spec.approval, *approvals) if r and r.applies(name, args)), None)
    if rule is not None:
        return Wait(
            question=_approval(ctx, spec, args, rule),
            next_phase="decided",
            reason=f"waiting for approval in queue {rule.queue}",
            effects=Effects(memo={"args": args}),
        )
    return _proceed(ctx, spec, args)


def _proceed(ctx: PhaseContext, spec: ToolSpec, args: dict[str, Any]) -> PhaseOutcome:
    if spec.task_kind is not None:
        child = TaskSpec(id=f"{ctx.task.id}.run", kind=spec.task_kind, input=args)
        return Wait(tasks=(child.id,), next_phase="collect", effects=Effects(spawn=(child,)))
    return Next(phase="execute", effects=Effects(memo={"args": args}))


def _approval(
    ctx: PhaseContext, spec: ToolSpec, args: dict[str, Any], rule: ApprovalRule
) -> Question:
    call = PendingCall(
        tool=spec.name,
        version=spec.version,
        arguments=args,
        operation_id=ctx.operation_id(CALL_KEY),
    )
    deadline = None if rule.within_s is None else ctx.now() + timedelta(seconds=rule.within_s)
    return Question(
        id=approval_id(ctx.task.id),
        prompt=f"Allow the call {spec.name}({_text(args)[:400]})?",
        kind=QuestionKind.APPROVAL,
        call=call,
        queue=rule.queue,
        deadline=deadline,
        on_deadline=rule.on_deadline,
        escalate_to=rule.escalate_to,
    )


def approval_id(call_task_id: str) -> str:
    """The id of the approval question of a tool call's task."""
    return f"approve.{call_task_id}"


async def _decided(ctx: PhaseContext) -> PhaseOutcome:
    """A person (or the deadline) decided on the call: go on, or tell the model no."""
    decision = ctx.answer(approval_id(ctx.task.id))
    spec = ctx.services.tools.spec(str(ctx.input["tool"]))
    if not decision.approved:
        why = f": {decision.why}" if decision.why else ""
        return _answer_error(ctx, "denied", f"the call was denied by {decision.by}{why}")
    if spec is None:  # approved, but this Brain no longer has the tool
        return _answer_error(ctx, "unknown_tool", f"tool {ctx.input['tool']!r} is gone")
    args: dict[str, Any] = dict(ctx.memo["args"])  # type: ignore[arg-type]
    return _proceed(ctx, spec, args)


CALL_KEY = "call"


async def _execute(ctx: PhaseContext) -> PhaseOutcome:
    args: dict[str, Any] = dict(ctx.memo["args"])  # type: ignore[arg-type]
    try:
        performed = await ctx.operation(str(ctx.input["tool"]), args, CALL_KEY)
    except (ToolFailed, InvalidInput) as error:
        # It definitely did not happen: tell the model. Anything else (outcome unknown,
        # parked, retryable) is the kernel's to handle.
        return _answer_error(ctx, error.code, error.message, applied=True)
    output, blob = _keep_small(performed.output, performed.blob)
    entry = _tool_result(ctx, ok=True, output=output, blob=blob)
    return Done(
        result=_reference(entry, performed.path),
        effects=Effects(entries=(entry,), applied_operations=(performed.operation_id,)),
    )


def _reference(entry: Entry, path: str) -> dict[str, JsonValue]:
    """A tool call's result: where its output is kept (entry, blob), not a copy of it."""
    return {
        "path": path,
        "operation_id": entry.operation_id,
        "entry": entry.id,
        "blob": entry.blob.digest if entry.blob else None,
    }


def _keep_small(output: JsonValue, blob: BlobRef | None) -> tuple[JsonValue, BlobRef | None]:
    """A large output stays in the blob its operation result keeps; the entry holds a
    preview and the reference."""
    if blob is None:
        return output, None
    data = json.dumps(output).encode()
    preview = data[:PREVIEW_BYTES].decode(errors="ignore")
    return {"preview": preview, "truncated": True, "bytes": len(data), "blob": blob.digest}, blob


async def _collect(ctx: PhaseContext) -> PhaseOutcome:
    child = ctx.get_task(f"{ctx.task.id}.run")
    assert child is not None and child.is_terminal
    if child.outcome is Outcome.SUCCEEDED:
        entry = _tool_result(ctx, ok=True, output=child.result)
        return Done(
            result=_reference(entry, "executed"),
            effects=Effects(entries=(entry,), applied_operations=(ctx.operation_id(CALL_KEY),)),
        )
    error = child.error or ErrorInfo(code="tool_cancelled", message=child.reason or "cancelled")
    return _answer_error(ctx, error.code, error.message, applied=True)


def _answer_error(ctx: PhaseContext, code: str, message: str, *, applied: bool = False) -> Fail:
    """Fail the call, telling the model what was wrong in the tool result."""
    entry = _tool_result(ctx, ok=False, output={"code": code, "message": message})
    applied_ids = (ctx.operation_id(CALL_KEY),) if applied else ()
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
        operation_id=ctx.operation_id(CALL_KEY),
        content={
            "call_id": ctx.input["call_id"],
            "tool": ctx.input["tool"],
            "ok": ok,
            "output" if ok else "error": output,
        },
    )


def _interruptions(
    ctx: PhaseContext, prefix: str, conversation: str, history: list[Entry]
) -> tuple[Entry, ...]:
    """Earlier attempts of this request with no record yet: the process running each of
    them died before any outcome. An attempt that ended with an error recorded its own."""
    recorded = {entry.id for entry in history if entry.kind is EntryKind.INTERRUPTION}
    written = ctx.document(PROGRESS_DOCUMENT)
    preview = written.body.get(ctx.task.id) if written is not None else None
    return tuple(
        _interruption(
            f"{prefix}.int{attempt}",
            conversation,
            attempt,
            "the process running this request stopped before it completed",
            preview=_preview_of(preview, f"{prefix}.a{attempt}"),
        )
        for attempt in range(1, ctx.attempt)
        if f"{prefix}.int{attempt}" not in recorded
    )


def _preview_of(member: object, request: str) -> dict[str, JsonValue] | None:
    """The last written preview of ``request``, as the progress document holds it."""
    if not isinstance(member, dict) or member.get("request") != request:
        return None
    return {key: member.get(key) for key in ("text", "chars", "truncated", "at")}


def _interrupted(ctx: PhaseContext) -> tuple[Entry, ...]:
    """The record of a model call a new message abandoned (policy interrupt), if the
    last round's was."""
    said = ctx.memo.get("interrupted")
    if not isinstance(said, dict):
        return ()
    round_ = ctx.memo_int("round")
    entry = Entry(
        id=f"{ctx.task.id}.r{round_}.interrupted",
        kind=EntryKind.INTERRUPTION,
        conversation_id=str(ctx.input.get("conversation_id", "main")),
        content={
            "round": round_,
            "why": str(said.get("why")),
            "note": "the model call was abandoned; no part of it is used as a response",
            **({"preview": {"text": said["preview"]}} if said.get("preview") else {}),
        },
    )
    return (entry,)


def _interruption(
    entry_id: str,
    conversation: str,
    attempt: int,
    why: str,
    *,
    preview: dict[str, JsonValue] | None = None,
) -> Entry:
    """The record of an attempt that gave no answer; ``preview``: the text it had
    streamed when last saved (kept as a record, never used as a response)."""
    content: dict[str, JsonValue] = {
        "attempt": attempt,
        "why": why,
        "note": "no part of it is used as a response",
    }
    if preview is not None:
        content["preview"] = preview
    return Entry(
        id=entry_id, kind=EntryKind.INTERRUPTION, conversation_id=conversation, content=content
    )


def _system(ctx: PhaseContext) -> ChatMessage:
    config = ctx.document(CONFIG_DOCUMENT)
    prompt = config.body.get("system_prompt", DEFAULT_PROMPT) if config else DEFAULT_PROMPT
    return ChatMessage(role="system", content=str(prompt))


def _messages(entries: list[Entry]) -> list[ChatMessage]:
    """The conversation as chat messages: each assistant message with tool calls is
    followed by exactly one tool message per call, whatever else was recorded between
    them (user input that arrived meanwhile comes after)."""
    results: dict[str, ChatMessage] = {}
    for entry in entries:
        content: Any = entry.content
        if entry.kind is EntryKind.TOOL_RESULT and isinstance(content, dict):
            call_id = str(content.get("call_id"))
            body = content.get("output") if content.get("ok") else {"error": content.get("error")}
            results.setdefault(
                call_id, ChatMessage(role="tool", tool_call_id=call_id, content=_text(body))
            )
    messages: list[ChatMessage] = []
    for entry in entries:
        content = entry.content
        if entry.kind is EntryKind.USER_INPUT:
            messages.append(ChatMessage(role="user", content=_text(content)))
        elif entry.kind is EntryKind.MODEL_RESPONSE and isinstance(content, dict):
            calls = tuple(ToolCall.model_validate(call) for call in content.get("tool_calls", ()))
            messages.append(
                ChatMessage(role="assistant", content=content.get("content"), tool_calls=calls)
            )
            messages.extend(results.get(call.id) or _no_result(call.id) for call in calls)
    return messages


def _no_result(call_id: str) -> ChatMessage:
    body = {"error": {"code": "no_result", "message": "no result was recorded for this call"}}
    return ChatMessage(role="tool", tool_call_id=call_id, content=_text(body))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
