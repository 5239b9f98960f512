"""Two processes making the store's bucket at once (``bh init`` and a service, or two
services): AWS answers the loser of concurrent creates ``409 OperationAborted`` ("a
conflicting conditional operation is currently in progress"), which is the race, not a
failure: ``ensure`` tries again (a few times, backing off) and then finds the bucket
made. moto and radosgw never answer so, hence a scripted S3 endpoint here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from contracts import StoreUnavailable
from session_store.backends.s3 import S3Backend

ABORTED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>OperationAborted</Code><Message>"
    b"A conflicting conditional operation is currently in progress against this resource."
    b"</Message></Error>"
)


class Endpoint:
    """Answers a bucket create ``OperationAborted`` ``aborts`` times, then 200."""

    def __init__(self, aborts: int) -> None:
        self.aborts = aborts
        self.creates = 0

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            self.creates += head.startswith(b"PUT ")
            if head.startswith(b"PUT ") and self.creates <= self.aborts:
                status, body = b"409 Conflict", ABORTED
            else:
                status, body = b"200 OK", b""
            length = str(len(body)).encode()
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: " + length + b"\r\n\r\n")
            writer.write(body)
            await writer.drain()


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
async def serve() -> AsyncIterator[tuple[Endpoint, str]]:
    endpoint = Endpoint(aborts=2)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await endpoint.answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield endpoint, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_bucket_create_aborted_by_a_concurrent_one_is_tried_again(
    credentials: None, serve: tuple[Endpoint, str]
) -> None:
    endpoint, url = serve
    backend = await S3Backend.connect(bucket="b", prefix="p", endpoint_url=url, region=None)
    try:
        await backend.ensure()
    finally:
        await backend.close()
    assert endpoint.creates == 3


async def test_a_create_aborted_every_time_is_the_store_unavailable(
    credentials: None, serve: tuple[Endpoint, str]
) -> None:
    endpoint, url = serve
    endpoint.aborts = 1000
    backend = await S3Backend.connect(bucket="b", prefix="p", endpoint_url=url, region=None)
    try:
        with pytest.raises(StoreUnavailable, match="OperationAborted"):
            await backend.ensure()
    finally:
        await backend.close()
    assert 1 < endpoint.creates < 20  # bounded
