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
from collections.abc import Callable, Iterator
from typing import Any


def server(app: Any, *, host: str, port: int) -> Any:
    """A uvicorn server for ``app`` that leaves signals to ``stop_on_signals``."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
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
