"""The Hands API client turns answers of any shape into the project's error tree (no
network: an in-process transport plays the API)."""

from __future__ import annotations

import httpx
import pytest

from bh.hands_client import HandsClient
from contracts import (
    AlreadyExists,
    BrainhandsError,
    InvalidInput,
    NotFound,
    StoreUnavailable,
)
from contracts.errors import Unauthorized


def client(status: int, body: object = None, *, text: str | None = None) -> HandsClient:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer secret-token"
        if text is not None:
            return httpx.Response(status, text=text)
        return httpx.Response(status, json=body)

    return HandsClient("http://hands.test/", "secret-token", transport=httpx.MockTransport(answer))


def error(code: str, message: str = "m", **details: object) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "details": details}}


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (404, "not_found", NotFound),
        (422, "invalid_input", InvalidInput),
        (409, "already_exists", AlreadyExists),
        (503, "store_unavailable", StoreUnavailable),
        (401, "unauthorized", Unauthorized),
    ],
)
async def test_an_error_answer_is_rebuilt_from_its_code(
    status: int, code: str, expected: type[BrainhandsError]
) -> None:
    async with client(status, error(code, "what went wrong", field="x")) as hands:
        with pytest.raises(expected) as raised:
            await hands.operation("op-1")
    assert raised.value.message == "what went wrong" and raised.value.code == code
    assert raised.value.details == {"field": "x"}


async def test_an_answer_that_is_not_an_error_body_still_maps_by_status() -> None:
    async with client(404, text="<html>no</html>") as hands:
        with pytest.raises(NotFound, match="HTTP 404"):
            await hands.tools()
    async with client(502, text="bad gateway") as hands:
        with pytest.raises(BrainhandsError, match="HTTP 502"):
            await hands.tools()


async def test_an_unreachable_api_is_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    hands = HandsClient("http://hands.test", "secret-token", transport=httpx.MockTransport(refuse))
    async with hands:
        with pytest.raises(StoreUnavailable) as raised:
            await hands.operation("op-1")
    assert raised.value.retryable and "secret-token" not in raised.value.message


async def test_a_malformed_success_is_an_error_not_a_crash() -> None:
    async with client(200, {"operation_id": 5}) as hands:
        with pytest.raises(BrainhandsError, match="not a OperationView"):
            await hands.operation("op-1")


async def test_a_bad_request_is_refused_before_it_is_sent() -> None:
    async with client(500, {}) as hands:
        with pytest.raises(InvalidInput, match=r"allow\[0\] 'no port' is invalid"):
            await hands.register_tool("img", allow=["no port"])
        with pytest.raises(InvalidInput, match=r"allow\[0\] 'no port' is invalid"):
            await hands.grant_tool("img", 1, allow=["no port"], by="ada", reason="r")
        with pytest.raises(InvalidInput, match=r"^reason '' is invalid"):
            await hands.grant_tool("img", 1, allow=[], by="ada", reason="")


def test_url_and_token_are_required() -> None:
    with pytest.raises(InvalidInput, match="BH_HANDS_API_URL"):
        HandsClient("", "token")
    with pytest.raises(InvalidInput, match="BH_HANDS_API_TOKEN"):
        HandsClient("http://hands.test", "")
