"""The example email service and its client over real HTTP: idempotency, query, auth,
dropped responses and persistence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.errors import InvalidInput, OutcomeUnknown, ToolFailed
from examples.emails.client import EmailClient, Receipt
from examples.emails.service import email_app
from tests.support.http_server import free_port, serve

TOKEN = "email-token-3c7f0a"
HELLO = {"to": "ada@example.com", "subject": "Hello", "body": "Your order shipped."}


@asynccontextmanager
async def email_service(
    *, ledger_path: Path | None = None, client_timeout: float = 2.0
) -> AsyncIterator[tuple[str, EmailClient]]:
    async with (
        serve(email_app(token=TOKEN, ledger_path=ledger_path)) as base_url,
        EmailClient(base_url, TOKEN, timeout=client_timeout) as client,
    ):
        yield base_url, client


@pytest.fixture
async def emails() -> AsyncIterator[EmailClient]:
    async with email_service() as (_, client):
        yield client


async def test_a_send_is_accepted_once_and_repeats_get_the_same_receipt(
    emails: EmailClient,
) -> None:
    first = await emails.send("op-1", **HELLO)
    again = await emails.send("op-1", **HELLO)
    ledger = await emails.ledger()
    assert first == again
    assert (first.operation_id, first.status, first.to) == ("op-1", "sent", HELLO["to"])
    assert [message.operation_id for message in ledger.messages] == ["op-1"]
    assert ledger.messages[0].message_id == first.message_id
    assert ledger.requests == {"op-1": 2}


async def test_first_send_is_202_and_a_repeat_is_200() -> None:
    async with email_service() as (base_url, _), httpx.AsyncClient(base_url=base_url) as http:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        body = {"operation_id": "op-1", **HELLO}
        statuses = [(await http.post("/messages", json=body, headers=auth)).status_code]
        statuses.append((await http.post("/messages", json=body, headers=auth)).status_code)
    assert statuses == [202, 200]


async def test_the_ledger_keeps_send_order(emails: EmailClient) -> None:
    for operation_id in ("op-b", "op-a", "op-c"):
        await emails.send(operation_id, **HELLO)
    ledger = await emails.ledger()
    assert [message.operation_id for message in ledger.messages] == ["op-b", "op-a", "op-c"]
    assert len({message.message_id for message in ledger.messages}) == 3


async def test_reusing_an_operation_id_for_other_content_fails(emails: EmailClient) -> None:
    await emails.send("op-1", **HELLO)
    with pytest.raises(ToolFailed, match="already used for a different message") as caught:
        await emails.send("op-1", **{**HELLO, "body": "Something else"})
    ledger = await emails.ledger()
    assert caught.value.details["status"] == 409
    assert [message.body for message in ledger.messages] == [HELLO["body"]]


@pytest.mark.parametrize("operation_id", ["op-1", "task/7 attempt?1#x"])
async def test_query_finds_a_sent_message_and_none_for_an_unknown_one(
    emails: EmailClient, operation_id: str
) -> None:
    receipt = await emails.send(operation_id, **HELLO)
    assert await emails.query(operation_id) == receipt
    assert await emails.query("op-never") is None
    assert await emails.query(f"{operation_id}/other") is None


async def test_a_wrong_token_fails_without_revealing_it() -> None:
    async with email_service() as (base_url, _):
        async with EmailClient(base_url, "wrong-token-77") as intruder:
            with pytest.raises(ToolFailed, match="HTTP 401") as on_send:
                await intruder.send("op-1", **HELLO)
            with pytest.raises(ToolFailed, match="HTTP 401"):
                await intruder.query("op-1")
        async with EmailClient(base_url, TOKEN) as owner:
            ledger = await owner.ledger()
    assert "wrong-token-77" not in str(on_send.value)
    assert TOKEN not in str(on_send.value)
    assert ledger.messages == ()


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/messages"), ("GET", "/messages/op-1"), ("GET", "/ledger"), ("POST", "/faults")],
)
async def test_every_route_but_health_needs_the_token(method: str, path: str) -> None:
    async with email_service() as (base_url, _), httpx.AsyncClient(base_url=base_url) as http:
        denied = await http.request(method, path, json={"operation_id": "op-1", **HELLO})
        health = await http.get("/healthz")
    assert denied.status_code == 401
    assert health.status_code == 200


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"to": "not-an-address"}, "to"),
        ({"subject": None}, "subject"),
        ({"operation_id": ""}, "operation_id"),
        ({"cc": "boss@example.com"}, "cc"),
    ],
)
async def test_a_malformed_send_gets_422_naming_the_field(
    fields: dict[str, Any], named: str
) -> None:
    body: dict[str, Any] = {"operation_id": "op-1", **HELLO, **fields}
    async with email_service() as (base_url, emails), httpx.AsyncClient(base_url=base_url) as http:
        response = await http.post(
            "/messages", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        ledger = await emails.ledger()
    assert response.status_code == 422
    assert response.json()["fields"] == [named]
    assert f"field {named!r}" in response.json()["error"]
    assert (ledger.messages, ledger.requests) == ((), {})


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"to": "not-an-address"}, "'to'"), ({"operation_id": ""}, "'operation_id'")],
)
async def test_the_client_reports_a_malformed_send_as_tool_failed(
    emails: EmailClient, fields: dict[str, str], named: str
) -> None:
    arguments = {"operation_id": "op-1", **HELLO, **fields}
    with pytest.raises(ToolFailed, match="HTTP 422") as caught:
        await emails.send(**arguments)
    assert named in caught.value.message
    assert caught.value.details["status"] == 422


async def test_a_missing_field_is_named() -> None:
    async with email_service() as (base_url, _), httpx.AsyncClient(base_url=base_url) as http:
        response = await http.post(
            "/messages",
            json={"operation_id": "op-1", "to": "ada@example.com", "body": "x"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert response.status_code == 422
    assert response.json()["fields"] == ["subject"]
    assert "field 'subject': Field required" in response.json()["error"]


@pytest.mark.parametrize(
    ("hold_seconds", "client_timeout", "observed"),
    [(0.5, 0.2, "ReadTimeout"), (0.05, 1.0, "RemoteProtocolError")],
)
async def test_a_dropped_response_is_outcome_unknown_yet_the_message_was_sent(
    hold_seconds: float, client_timeout: float, observed: str
) -> None:
    # Only the send is meant to time out: the rest asks with the default timeout, which
    # a loaded machine's slow connect does not exceed (0.2 s could).
    async with (
        email_service(client_timeout=client_timeout) as (base_url, impatient),
        EmailClient(base_url, TOKEN) as emails,
    ):
        await emails.set_faults(drop_responses=1, hold_seconds=hold_seconds)
        with pytest.raises(OutcomeUnknown, match=observed) as caught:
            await impatient.send("op-1", **HELLO)
        found = await emails.query("op-1")
        ledger = await emails.ledger()
        retried = await emails.send("op-1", **HELLO)
        ledger_after_retry = await emails.ledger()
    assert caught.value.details == {"operation_id": "op-1"}
    assert found is not None
    assert [message.operation_id for message in ledger.messages] == ["op-1"]
    assert retried == found
    assert len(ledger_after_retry.messages) == 1
    assert ledger_after_retry.requests == {"op-1": 2}


async def test_faults_drop_only_the_requested_number_and_can_be_cleared() -> None:
    async with email_service(client_timeout=1.0) as (_, emails):
        await emails.set_faults(drop_responses=2, hold_seconds=0.0)
        outcomes: list[Receipt | None] = []
        for operation_id in ("op-1", "op-2", "op-3"):
            try:
                outcomes.append(await emails.send(operation_id, **HELLO))
            except OutcomeUnknown:
                outcomes.append(None)
        await emails.set_faults(drop_responses=5, hold_seconds=0.0)
        await emails.clear_faults()
        after_clear = await emails.send("op-4", **HELLO)
        ledger = await emails.ledger()
    assert [isinstance(outcome, Receipt) for outcome in outcomes] == [False, False, True]
    assert after_clear.operation_id == "op-4"
    assert [message.operation_id for message in ledger.messages] == ["op-1", "op-2", "op-3", "op-4"]


async def test_the_ledger_survives_a_restart_with_a_ledger_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    async with email_service(ledger_path=path) as (_, emails):
        receipt = await emails.send("op-1", **HELLO)
        await emails.send("op-1", **HELLO)
    async with email_service(ledger_path=path) as (_, emails):
        found = await emails.query("op-1")
        repeat = await emails.send("op-1", **HELLO)
        ledger = await emails.ledger()
    assert found == receipt
    assert repeat == receipt
    assert len(ledger.messages) == 1
    assert ledger.requests == {"op-1": 3}


def test_a_corrupt_ledger_file_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text("{not json")
    with pytest.raises(InvalidInput, match="cannot load the email ledger") as caught:
        email_app(token=TOKEN, ledger_path=path)
    assert str(path) in str(caught.value)


async def test_an_unreachable_service_is_outcome_unknown_on_send_and_query() -> None:
    async with EmailClient(f"http://127.0.0.1:{free_port()}", TOKEN) as emails:
        with pytest.raises(OutcomeUnknown, match="ConnectError"):
            await emails.send("op-1", **HELLO)
        with pytest.raises(OutcomeUnknown, match="no answer to the query"):
            await emails.query("op-1")
        with pytest.raises(ToolFailed, match="unreachable"):
            await emails.ledger()


@asynccontextmanager
async def drops_first_connections(drops: int) -> AsyncIterator[str]:
    """A server that reads a request and closes the connection without answering (a
    keep-alive connection the server had just closed) ``drops`` times, then answers 404."""
    seen = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        await reader.readuntil(b"\r\n\r\n")
        seen += 1
        if seen > drops:
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_a_query_is_asked_again_when_the_connection_drops_before_an_answer() -> None:
    """A GET that got no response at all is safe to ask again at once: one dropped
    connection is not an unknown outcome (finding 5 of the compose deployment)."""
    async with drops_first_connections(1) as url, EmailClient(url, TOKEN) as emails:
        assert await emails.query("op-1") is None


async def test_a_query_dropped_again_and_a_send_dropped_once_are_unknown() -> None:
    """Asked again once only; and a send is never repeated by the client (the dropped
    one may have been accepted): both are unknown outcomes for the kernel to recover."""
    async with drops_first_connections(2) as url, EmailClient(url, TOKEN) as emails:
        with pytest.raises(OutcomeUnknown, match="no answer to the query"):
            await emails.query("op-1")
    async with drops_first_connections(1) as url, EmailClient(url, TOKEN) as emails:
        with pytest.raises(OutcomeUnknown, match="no answer to the send"):
            await emails.send("op-1", **HELLO)
