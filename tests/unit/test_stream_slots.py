"""The caps on open event streams (issue 31): a slot is charged before a stream opens
and given back however the response ends — even one that never started."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.requests import ClientDisconnect

from contracts.errors import BrainhandsError, ErrorInfo, TooManyRequests
from session_api.stream import HeldStream, StreamSettings, StreamSlots


def test_each_cap_refuses_once_reached_and_a_release_frees_a_slot() -> None:
    slots = StreamSlots(StreamSettings(max_open=3, max_open_per_token=2, refused_retry=7))
    a1, a2 = slots.reserve("a"), slots.reserve("a")
    with pytest.raises(TooManyRequests) as per_token:
        slots.reserve("a")
    assert per_token.value.details == {"limit": 2, "retry_after": 7.0}
    b1 = slots.reserve("b")
    with pytest.raises(TooManyRequests, match="this server"):
        slots.reserve("c")
    a1.release()
    a1.release()  # twice is once
    assert slots.open == 2
    slots.reserve("c")
    for slot in (a2, b1):
        slot.release()
    assert slots.open == 1


async def test_a_response_that_never_started_gives_its_slot_back() -> None:
    """The client went away before the first byte: the body's generator never ran (its
    ``finally`` would never run either), the response still releases its slot."""
    slots = StreamSlots(StreamSettings(max_open_per_token=1))
    started = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal started
        started = True
        yield b"never sent"

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        raise OSError("the client is gone")

    response = HeldStream(slots.reserve("a"), body(), media_type="text/event-stream")
    scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    with pytest.raises(ClientDisconnect):  # Starlette's word for the OSError
        await response(scope, receive, send)
    assert slots.open == 0 and not started
    slots.reserve("a")  # the token's one slot is free again


def test_a_client_reads_the_refusal_back_as_retryable() -> None:
    """``bh watch`` (``SessionApiClient.follow``) retries what is retryable."""
    info = ErrorInfo(code="too_many_requests", message="m", details={"retry_after": 5})
    error = BrainhandsError.from_info(info)
    assert isinstance(error, TooManyRequests) and error.retryable
