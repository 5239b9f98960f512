"""A model server's ``Retry-After`` as an HTTP date is read against the response's own
``Date`` (the server's clock), never against the Brain's (invariant 17)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from pydantic import SecretStr

from brain.model import ChatMessage, ModelSettings, OpenAIChatClient
from contracts.errors import ModelUnavailable

USER = ChatMessage(role="user", content="hi")


def _limited(server_now: datetime, wait: timedelta) -> httpx.MockTransport:
    """A model server whose clock reads ``server_now``, asking for ``wait`` as a date."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429,
            headers={
                "Date": format_datetime(server_now, usegmt=True),
                "Retry-After": format_datetime(server_now + wait, usegmt=True),
            },
            json={"error": {"message": "slow down"}},
        )

    return httpx.MockTransport(answer)


@pytest.mark.parametrize("server_off_by", [timedelta(hours=-1), timedelta(hours=1)])
async def test_a_retry_after_date_is_read_on_the_servers_clock(server_off_by: timedelta) -> None:
    """A server an hour behind (or ahead) asks to wait 30 s: the wait is 30 s (before:
    0, or the hour bound)."""
    server_now = datetime.now(UTC).replace(microsecond=0) + server_off_by
    settings = ModelSettings(base_url="http://model/v1", api_key=SecretStr("k"), model="m")
    transport = _limited(server_now, timedelta(seconds=30))
    async with OpenAIChatClient(settings, transport=transport) as client:
        with pytest.raises(ModelUnavailable) as raised:
            await client.complete([USER], request_id="req-1")
    assert raised.value.details["retry_after"] == 30
