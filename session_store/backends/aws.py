"""What the S3 and DynamoDB backends share: client setup and error translation."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any, Literal, NoReturn

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
)

from contracts import PayloadTooLarge, ReadOnlyStore, StoreMissing, StoreUnavailable
from session_store.clock import ServerClock

#: errors of the way to the store, not answers from it: the store is unavailable. An
#: HTTP body broken off mid-read (the server restarting) comes out of aiohttp itself,
#: not wrapped by botocore (``tests/unit/test_s3_broken_peer.py``)
TRANSIENT: tuple[type[Exception], ...] = (BotoCoreError, OSError, TimeoutError, aiohttp.ClientError)
_MISSING = frozenset({"NoSuchBucket", "ResourceNotFoundException"})
_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnrecognizedClientException"})


async def open_client(
    service: Literal["s3", "dynamodb"],
    stack: AsyncExitStack,
    *,
    endpoint_url: str | None,
    region: str | None,
    clock: ServerClock,
) -> Any:
    """An aiobotocore client living as long as ``stack``; every response it receives
    tells ``clock`` the server's time (its ``Date`` header).

    Retries are left to botocore's standard mode (with jitter); the store makes a retried
    create safe by recognising its own record when the create reports "exists".

    A pooled connection whose peer died silently (a partition: no reset) must not hold a
    call for long: a read that gets no byte for ``read_timeout`` (10 s; it bounds each
    read, not a whole transfer) ends the attempt and its connection, and the retry
    opens another; TCP keepalive lets the kernel drop idle dead ones.
    """
    config = AioConfig(
        retries={"max_attempts": 4, "mode": "standard"},
        connect_timeout=3,
        read_timeout=10,
        tcp_keepalive=True,
        max_pool_connections=64,
        s3={"addressing_style": "path"} if service == "s3" else None,
    )
    session = get_session()
    options: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "region_name": region or "us-east-1",
        "config": config,
    }
    creator = (
        session.create_client("s3", **options)
        if service == "s3"
        else session.create_client("dynamodb", **options)
    )
    client = await stack.enter_async_context(creator)
    client.meta.events.register("after-call", _telling(clock))
    return client


def _telling(clock: ServerClock) -> Any:
    """An ``after-call`` handler feeding each response's ``Date`` to ``clock`` (errors
    included: a refused conditional write tells the time as well as an accepted one)."""

    def tell(http_response: Any = None, **_: Any) -> None:
        headers = getattr(http_response, "headers", None)
        if headers is not None:
            clock.observe_header(headers.get("date"))

    return tell


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def translate(error: Exception, where: str) -> NoReturn:
    """Re-raise a botocore error as the project's error; ``where`` names the store."""
    if isinstance(error, ClientError):
        code = error_code(error)
        if code in _MISSING:
            raise StoreMissing(
                f"{where} does not exist; create it first (`bh store init URL`)",
                aws_code=code,
            ) from None
        if code in _DENIED:
            raise ReadOnlyStore(f"{where} refused the request ({code})", aws_code=code) from None
        if _too_large(error, code):
            raise PayloadTooLarge(
                f"{where} refused an item as too large ({code}); store large payloads as "
                "blobs and reference them",
                aws_code=code,
            ) from None
        raise StoreUnavailable(
            f"{where} failed: {code or 'unknown error'}", aws_code=code
        ) from None
    if isinstance(error, NoCredentialsError):
        raise StoreUnavailable(
            f"{where}: no AWS credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ) from None
    if isinstance(error, EndpointConnectionError):
        raise StoreUnavailable(f"{where}: cannot connect to the endpoint") from None
    if isinstance(error, TRANSIENT):
        raise StoreUnavailable(f"{where}: {type(error).__name__}: {error}") from None
    raise error


def _too_large(error: ClientError, code: str) -> bool:
    # DynamoDB: ValidationException "Item size has exceeded the maximum allowed size";
    # S3: EntityTooLarge. Oversize is the caller's problem, never "try again".
    message = str(error.response.get("Error", {}).get("Message", ""))
    return code == "EntityTooLarge" or (code == "ValidationException" and "size" in message)
