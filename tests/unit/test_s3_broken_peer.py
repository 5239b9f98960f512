"""An S3 endpoint that breaks off a response mid-body (the server restarting under a
read): the backend reports the store unavailable — the retryable error every service
waits out — never an HTTP library's own exception, which ended the scheduler's loops and
its process (a compose run's scheduler was not back 20 s after its S3 restarted)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from contracts import StoreUnavailable
from session_store.backends.s3 import S3Backend


@pytest.fixture
async def cut_off() -> AsyncIterator[str]:
    """Answers every request 200 with a body 100 bytes long, sends 10 and hangs up."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_body_broken_off_mid_read_is_the_store_unavailable(
    cut_off: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    backend = await S3Backend.connect(bucket="b", prefix="p", endpoint_url=cut_off, region=None)
    try:
        with pytest.raises(StoreUnavailable):
            await backend.get("log/s1", "0000000001")
    finally:
        await backend.close()
