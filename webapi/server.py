"""Serving an API app with uvicorn inside a process that owns its signals.

uvicorn's own signal handling re-raises SIGTERM once it stopped, which would end the
process before the service closed its store, bus or consumer; here the first SIGINT or
SIGTERM asks for a graceful stop (after ``stopping``, e.g. ending event streams), a
second one for an immediate one.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any


def server(app: Any, *, host: str, port: int) -> Any:
    """A uvicorn server for ``app`` that leaves signals to ``stop_on_signals``."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    from runtime.logs import json_lines

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        # JSON lines: uvicorn's loggers go to the root logger's JSON handler
        log_config=None if json_lines() else uvicorn.config.LOGGING_CONFIG,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    return Server(config)


@contextlib.contextmanager
def stop_on_signals(server: Any, stopping: Callable[[], None] = lambda: None) -> Iterator[None]:
    """SIGINT/SIGTERM: ``stopping()``, then stop gracefully; a second one: stop now."""
    loop = asyncio.get_running_loop()

    def stop() -> None:
        if server.should_exit:
            server.force_exit = True
        stopping()
        server.should_exit = True

    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop)
    try:
        yield
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


@contextlib.asynccontextmanager
async def serving(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """``async with serving(app) as base_url:`` — uvicorn on this event loop (port 0: a free
    one), stopped at the end; for in-process servers of tests and harnesses."""
    import uvicorn

    port = port or free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    running = uvicorn.Server(config)
    task = asyncio.create_task(running.serve())
    while not running.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        running.should_exit = True
        await task


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now (for a server about to listen on it)."""
    import socket

    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
