"""An in-process tool's request is proved again as it is written, and carries its
attempt's fence, which the service checks (issue 31, defect 13). Over real HTTP on
loopback: the example email service and its client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from brain.attempt import Attempt
from brain.operations import RecoveryPending
from contracts import utcnow
from contracts.errors import ToolFailed
from examples.emails.client import EmailClient
from examples.emails.service import email_app
from tests.support.http_server import serve

TOKEN = "email-token-5e1d"
HELLO = {"to": "ada@example.com", "subject": "Hello", "body": "Your order shipped."}


class HoldFirstSend:
    """The email service, holding the first send until ``release`` (a slow answer: the
    next request of a one-connection pool waits for the connection meanwhile)."""

    def __init__(self) -> None:
        self.app = email_app(token=TOKEN)
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.sends: list[dict[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/messages":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            self.sends.append(headers)
            if len(self.sends) == 1:
                self.held.set()
                await self.release.wait()
        await self.app(scope, receive, send)


@pytest.fixture
async def service() -> AsyncIterator[tuple[HoldFirstSend, str]]:
    held = HoldFirstSend()
    async with serve(held) as base_url:
        yield held, base_url


def attempt(operation_id: str, proof: dict[str, bool], **deadline: Any) -> Attempt:
    def prove() -> None:
        if not proof["held"]:
            raise RecoveryPending(f"operation {operation_id}: the lease was lost")

    return Attempt(
        operation_id=operation_id,
        deadline=utcnow() + timedelta(**(deadline or {"seconds": 30})),
        prove=prove,
    )


async def test_a_send_waiting_for_its_connection_is_not_written_once_the_lease_is_lost(
    service: tuple[HoldFirstSend, str],
) -> None:
    """The proof before the call passed; the request then waited for a connection (the
    fan-out's other request held it) while the lease lapsed. Written anyway, it would
    reach the service after another Brain had verified and sent the operation (the
    fleet run: 8 POSTs after acceptance, each from a Brain resumed after a freeze)."""
    held, base_url = service
    proof = {"held": True}
    one = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
    async with EmailClient(base_url, TOKEN, transport=one) as email:

        async def send(operation_id: str) -> Any:
            with attempt(operation_id, proof).running():
                return await email.send(operation_id, **HELLO)

        first = asyncio.create_task(send("op-1"))
        await asyncio.wait_for(held.held.wait(), 10)
        second = asyncio.create_task(send("op-2"))  # waits for the one connection
        proof["held"] = False  # the lease lapses meanwhile
        held.release.set()
        answers = await asyncio.gather(first, second, return_exceptions=True)
    assert len(held.sends) == 1, "the second send was written after the lease was lost"
    assert held.sends[0]["brainhands-operation-id"] == "op-1"
    assert isinstance(answers[1], RecoveryPending), answers


async def test_a_send_carries_its_fence_and_the_service_refuses_it_after_the_deadline(
    service: tuple[HoldFirstSend, str],
) -> None:
    held, base_url = service
    held.release.set()
    proof = {"held": True}
    async with EmailClient(base_url, TOKEN) as email:
        with attempt("op-1", proof).running():
            receipt = await email.send("op-1", **HELLO)
        with attempt("op-2", proof, seconds=-1).running(), pytest.raises(ToolFailed) as late:
            await email.send("op-2", **HELLO)
        await email.send("op-3", **HELLO)  # outside any attempt: no fence, accepted
        ledger = await email.ledger()
    assert receipt.operation_id == "op-1"
    assert "after its attempt's deadline" in late.value.message
    assert held.sends[0]["brainhands-attempt-deadline"]
    assert "brainhands-operation-id" not in held.sends[2]
    assert [m.operation_id for m in ledger.messages] == ["op-1", "op-3"]
    assert ledger.late == {"op-2": 1} and "op-2" not in ledger.requests
