"""Delivering a warm container its job, and reading its run as it happens.

A bound warm container (``hands.sandbox.pool``) waits on its stdin. An ``Attachment``
attaches to its stdin, stdout and stderr in one connection (a thread of its own: the
read blocks for the whole run), writes the job and closes its side of stdin — the
container's stdin closes with it (``StdinOnce``) — and then reads the two streams,
demultiplexed, through a ``Trailer`` each until both trailers have arrived: the tool's
interpreter is done, its exit code is known, and every byte it wrote has been read,
tens of milliseconds before the engine has torn the container down. A stream that ends
without its trailer (the tool was killed, or exec'd a program of its own) leaves the
end to the engine's own word.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from hands.sandbox.output import Capture
from hands.sandbox.trailer import Trailer

_HEADER = struct.Struct(">BxxxL")


class Attachment:
    """One warm run's job delivered and its streams read (``done`` ends when both
    trailers arrived, the stream ended, stdout went past its cap, or ``cancel``). The
    thread owns ``api`` (a client of its own) and closes it."""

    def __init__(
        self,
        api: Any,
        container_id: str,
        job: bytes,
        *,
        nonce: str,
        stdout: Capture,
        stderr: Capture,
        log: Capture | None = None,
        check: Callable[[], None] | None = None,
    ) -> None:
        """``check``: called in the thread right before the job is written; what it
        raises ends the attachment with nothing written (the tool never starts)."""
        self._api, self._id, self._job = api, container_id, job
        self._check = check
        self.stdout = Trailer(stdout.feed, nonce=nonce)
        self.stderr = Trailer(self._to_stderr, nonce=nonce, bound=True)
        self._stdout_capture, self._stderr_capture, self._log = stdout, stderr, log
        #: the job was written and stdin closed (the tool may run from here on)
        self.delivered = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._cancelled = self._cancelled_by_caller = False
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        threading.Thread(
            target=self._run, name=f"bh-attach-{container_id[:12]}", daemon=True
        ).start()

    @property
    def code(self) -> int | None:
        """The tool's exit code, when both trailers arrived."""
        return self.stdout.code if self.stdout.ended and self.stderr.ended else None

    @property
    def over(self) -> bool:
        return self._stdout_capture.over

    def _to_stderr(self, data: bytes) -> None:
        self._stderr_capture.feed(data)
        if self._log is not None:
            self._log.feed(data)

    def _run(self) -> None:
        error: BaseException | None = None
        attached: Any = None
        try:
            attached = self._api.attach_socket(
                self._id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            raw: socket.socket = attached._sock
            with self._lock:
                self._socket = raw
                if self._cancelled:
                    return
            if self._check is not None:
                self._check()
            raw.sendall(self._job)
            raw.shutdown(socket.SHUT_WR)  # the container's stdin closes (StdinOnce)
            self.delivered = True
            self._read(raw)
            for stream in (self.stdout, self.stderr):
                if not stream.ended:
                    stream.close()  # ended without its trailer: what it held is the tool's
        except BaseException as failure:  # reported to the loop, which decides
            error = failure
        finally:
            self.cancel()
            with contextlib.suppress(Exception):
                attached.close()
                attached._response.close()
            with contextlib.suppress(Exception):
                self._api.close()  # the thread owns its client
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self._loop.call_soon_threadsafe(self._settle, error)

    def _read(self, raw: socket.socket) -> None:
        buffer = bytearray()
        while not (self.stdout.ended and self.stderr.ended):
            chunk = raw.recv(65536)
            if not chunk:
                return
            buffer += chunk
            while len(buffer) >= _HEADER.size:
                kind, size = _HEADER.unpack_from(buffer)
                if len(buffer) < _HEADER.size + size:
                    break
                payload = bytes(buffer[_HEADER.size : _HEADER.size + size])
                del buffer[: _HEADER.size + size]
                (self.stderr if kind == 2 else self.stdout).feed(payload)
                if self.over:
                    return

    def _settle(self, error: BaseException | None) -> None:
        if not self.done.done():
            if error is None or self._cancelled_by_caller:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)

    def cancel(self, *, by_caller: bool = False) -> None:
        with self._lock:
            self._cancelled = True
            self._cancelled_by_caller |= by_caller
            raw, self._socket = self._socket, None
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)  # a blocked recv returns
            with contextlib.suppress(OSError):
                raw.close()
