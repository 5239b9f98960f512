"""Run an ASGI app from a command line: bind, announce the address, stop cleanly on a signal.

Used by the helper servers that tests and the demo start as processes (the scripted model
server, the example email service). A parent waits for the single ``listening on URL`` line
on stdout, so port 0 works: the line carries the port the OS actually picked.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def announce_on_stdout(url: str) -> None:
    print(f"listening on {url}", flush=True)


def run_app(
    app: Any, *, host: str, port: int, announce: Callable[[str], None] = announce_on_stdout
) -> None:
    """Serve ``app`` until SIGINT/SIGTERM, then shut down gracefully and return."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    _AnnouncingServer(config, announce).run()


class _AnnouncingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, announce: Callable[[str], None]) -> None:
        super().__init__(config)
        self._announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._announce(self._url())

    def _url(self) -> str:
        port = self.servers[0].sockets[0].getsockname()[1]
        host = self.config.host
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises a captured signal after its graceful shutdown, so the process
        # would end "killed by SIGTERM"; a helper stopped on purpose should exit with 0.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
