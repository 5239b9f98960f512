"""The worked example: "send the approved notice to five customers and summarise".

``send_batch_emails`` is a composite tool. Its task (``send-batch``) stores the recipient
plan in a Document — each distinct recipient once, repeated addresses reported as
duplicates — creates one ``send-notice`` subtask per recipient, in order,
``concurrency`` at a time (one by default), waits for them (allSettled), and returns the
summary.

``send-notice`` sends through the email service (``send_email``: not replay-safe, but
queryable by operation id) and then confirms the message with the service. Its operation
id is derived by the kernel from the session and the notice's task, and recorded in the
plan. After a crash, ``brain.operations`` verifies an unconfirmed send by its operation
id instead of sending again.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

from pydantic import JsonValue, SecretStr

from brain.context import PhaseContext
from brain.operations import operation_id
from brain.outcome import Done, Effects, Fail, Next, PhaseOutcome, TaskSpec, Wait
from brain.registry import Registry, TaskKind
from brain.tools import LocalDispatcher, QueryAnswer, ToolSpec
from contracts import DocumentPut, ErrorInfo, Outcome, ReplayPolicy
from examples.emails.client import EmailClient

SEND_EMAIL = "send_email"
SEND_BATCH = "send_batch_emails"
BATCH_KIND = "send-batch"
NOTICE_KIND = "send-notice"
SEND_KEY = "send"

_ADDRESS = {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+$"}
SEND_EMAIL_SPEC = ToolSpec(
    name=SEND_EMAIL,
    description="Send one email.",
    parameters={
        "type": "object",
        "properties": {"to": _ADDRESS, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
    replay=ReplayPolicy.UNSAFE,
    # The client gives up after 2 s; an attempt is over (and may be verified by another
    # Brain) 10 s after it started.
    timeout=timedelta(seconds=10),
)
SEND_BATCH_SPEC = ToolSpec(
    name=SEND_BATCH,
    description="Send the same notice to each recipient, one email each, and summarise.",
    parameters={
        "type": "object",
        "properties": {
            "recipients": {"type": "array", "items": _ADDRESS, "minItems": 1, "maxItems": 100},
            "subject": {"type": "string", "minLength": 1},
            "body": {"type": "string", "minLength": 1},
            "concurrency": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["recipients", "subject", "body"],
        "additionalProperties": False,
    },
    task_kind=BATCH_KIND,
)


def install(registry: Registry, tools: LocalDispatcher, email: EmailClient) -> None:
    """Register the example's task kinds and tools."""

    async def send(args: dict[str, Any], operation_id: str) -> JsonValue:
        receipt = await email.send(operation_id, args["to"], args["subject"], args["body"])
        return receipt.model_dump()

    async def query(args: dict[str, Any], operation_id: str) -> QueryAnswer:
        receipt = await email.query(operation_id)
        return QueryAnswer(found=receipt is not None, output=receipt and receipt.model_dump())

    tools.register(SEND_EMAIL_SPEC, send, query)
    tools.register(SEND_BATCH_SPEC)
    registry.add(TaskKind(BATCH_KIND, 1, {"start": _plan, "send": _send, "summarise": _summarise}))
    registry.add(TaskKind(NOTICE_KIND, 1, {"start": _send_notice, "confirm": _confirm}))


async def plugin(registry: Registry, tools: LocalDispatcher, resources: AsyncExitStack) -> None:
    """Entry point for ``python -m brain run --plugin examples.emails.tasks:plugin``."""
    email = EmailClient(
        os.environ["BH_EMAIL_SERVICE_URL"], SecretStr(os.environ["BH_EMAIL_SERVICE_TOKEN"])
    )
    resources.push_async_callback(email.aclose)
    install(registry, tools, email)


def notice_task_id(batch_id: str, index: int) -> str:
    return f"{batch_id}.n{index}"


def notice_operation_id(session_id: str, batch_id: str, index: int) -> str:
    """The send of the batch's ``index``-th distinct recipient (as the kernel derives it)."""
    return operation_id(session_id, notice_task_id(batch_id, index), SEND_KEY)


def _plan_name(ctx: PhaseContext) -> str:
    return f"plan.{ctx.task.id}"


async def _plan(ctx: PhaseContext) -> PhaseOutcome:
    args = ctx.input
    distinct: list[str] = []
    duplicates: list[str] = []
    for to in args["recipients"]:
        (duplicates if to in distinct else distinct).append(to)
    recipients = [
        {"to": to, "operation_id": notice_operation_id(ctx.session_id, ctx.task.id, index)}
        for index, to in enumerate(distinct)
    ]
    plan = DocumentPut(
        name=_plan_name(ctx),
        kind="email-plan",
        body={
            "recipients": recipients,
            "duplicates": sorted(set(duplicates)),
            "subject": args["subject"],
            "concurrency": args.get("concurrency", 1),
        },
        expected_version=0,
    )
    return Next(phase="send", effects=Effects(documents=(plan,)))


async def _send(ctx: PhaseContext) -> PhaseOutcome:
    plan = ctx.document(_plan_name(ctx))
    assert plan is not None
    recipients: list[dict[str, str]] = plan.body["recipients"]
    spawned = ctx.memo_int("spawned")
    if spawned >= len(recipients):
        return Next(phase="summarise")
    batch = recipients[spawned : spawned + int(plan.body["concurrency"])]
    notices = tuple(
        TaskSpec(
            id=notice_task_id(ctx.task.id, spawned + offset),
            kind=NOTICE_KIND,
            input={
                "to": recipient["to"],
                "subject": ctx.input["subject"],
                "body": ctx.input["body"],
            },
        )
        for offset, recipient in enumerate(batch)
    )
    return Wait(
        tasks=tuple(notice.id for notice in notices),
        next_phase="send",
        effects=Effects(spawn=notices, memo={"spawned": spawned + len(batch)}),
    )


async def _summarise(ctx: PhaseContext) -> PhaseOutcome:
    plan = ctx.document(_plan_name(ctx))
    receipts = [_receipt(ctx, notice) for notice in ctx.children()]
    sent = sum(1 for receipt in receipts if receipt["outcome"] == Outcome.SUCCEEDED.value)
    return Done(
        result={
            "sent": sent,
            "failed": len(receipts) - sent,
            "duplicates": plan.body.get("duplicates", []) if plan else [],
            "receipts": receipts,
        }
    )


def _receipt(ctx: PhaseContext, notice: Any) -> dict[str, JsonValue]:
    result = notice.result if isinstance(notice.result, dict) else {}
    path = result.get("path")
    # Settled by an earlier incarnation of the Brain: this one reused the stored result.
    recovery = path if notice.settled_by == ctx.services.runner_id else "reused"
    return {
        "to": notice.input["to"],
        "operation_id": operation_id(ctx.session_id, notice.id, SEND_KEY),
        "message_id": result.get("message_id"),
        "outcome": notice.outcome.value if notice.outcome else None,
        "path": path,
        "recovery": recovery,
        "settled_by": notice.settled_by,
    }


async def _send_notice(ctx: PhaseContext) -> PhaseOutcome:
    args = {key: ctx.input[key] for key in ("to", "subject", "body")}
    performed = await ctx.operation(SEND_EMAIL, args, SEND_KEY)
    output = performed.output if isinstance(performed.output, dict) else {}
    memo = {"message_id": output.get("message_id"), "path": performed.path}
    spec = ctx.services.tools.spec(SEND_EMAIL)
    if spec is not None and spec.sandboxed:
        # The Hands' record of the run is the confirmation: apply it now, in one commit.
        return _confirmed(ctx, performed.operation_id, memo)
    return Next(phase="confirm", effects=Effects(memo=memo))


def _confirmed(ctx: PhaseContext, sent: str, memo: dict[str, JsonValue]) -> Done:
    result = {
        "to": ctx.input["to"],
        "operation_id": sent,
        "message_id": memo.get("message_id"),
        "path": memo.get("path"),
    }
    return Done(result=result, effects=Effects(applied_operations=(sent,)))


async def _confirm(ctx: PhaseContext) -> PhaseOutcome:
    sent = ctx.operation_id(SEND_KEY)
    args = {key: ctx.input[key] for key in ("to", "subject", "body")}
    ctx.crash_point(f"call:before:confirm:{SEND_EMAIL}")
    answer = await ctx.services.tools.query(SEND_EMAIL, args, operation_id=sent)
    ctx.crash_point(f"call:after:confirm:{SEND_EMAIL}")
    if not answer.found:
        message = f"the email service has no record of {sent} after sending it"
        return Fail(error=ErrorInfo(code="not_confirmed", message=message))
    return _confirmed(ctx, sent, ctx.memo)
