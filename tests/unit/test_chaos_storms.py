"""A cancel storm counts a session of its own only once the Session API accepted it.

A storm cut short (the chaos run cancels its fault task once the work has settled) had
named its two sessions before submitting them; the check then found no submission and
reported ``lost submission c4`` for a session nobody submitted (CI, stop 31).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from bh.chaos_cancel import CancelStorms
from runtime.cancellation import cancel_and_wait
from session_store import open_store

pytestmark = pytest.mark.sqlite


class _Api:
    """A Session API on loopback that accepts the first ``accept`` submissions and then
    holds every request without answering."""

    def __init__(self, accept: int) -> None:
        self.accept = accept
        self.seen = 0
        self.held = asyncio.Event()
        self.released = asyncio.Event()
        self.handlers: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.seen += 1
        if self.seen <= self.accept:
            writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
        else:
            self.held.set()
            await self.released.wait()
        writer.close()
        await writer.wait_closed()


async def _storm_cut_short(tmp_path: Path, accept: int) -> list[str]:
    api = _Api(accept)
    server = await asyncio.start_server(api.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        storms = CancelStorms(f"http://127.0.0.1:{port}", "token", store)
        storm = asyncio.create_task(storms.storm(0, random.Random(1)))
        await asyncio.wait_for(api.held.wait(), 10)
        await cancel_and_wait(storm)
        return storms.own
    finally:
        api.released.set()
        server.close()
        await asyncio.gather(*api.handlers, return_exceptions=True)
        await store.close()


async def test_a_storm_cut_short_before_the_api_answered_owns_no_session(tmp_path: Path) -> None:
    assert await _storm_cut_short(tmp_path, accept=0) == []


async def test_a_storm_cut_short_owns_the_sessions_the_api_accepted(tmp_path: Path) -> None:
    assert await _storm_cut_short(tmp_path, accept=1) == ["c0"]
