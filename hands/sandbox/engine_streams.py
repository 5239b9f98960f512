"""The Docker engine's blocking streams, each read in a thread of its own.

A log follow and the engine's ``wait`` block for as long as the run lasts, so neither
runs on the shared executor of ``asyncio.to_thread``: a ``Follower`` and a ``Waiter``
each start a daemon thread and report to the event loop through a future (``done``).
``logs`` opens a container's log as a stream of raw chunks; ``close_stream`` releases
one, so that a read blocked on it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import docker.types  # type: ignore[import-untyped]
import requests

from hands.sandbox.engine_outcome import translated
from hands.sandbox.output import Capture

#: one engine ``wait`` call's bound (repeated until the exit): how long a cancelled
#: waiter's thread may linger
WAIT_CALL_S = 30.0


class Follower:
    """Follows a container's stdout (or, with ``err``, stderr) log in a thread of its
    own until the container stops, the capture is full, or ``cancel`` (which leaves the
    container alone)."""

    def __init__(self, api: Any, container_id: str, capture: Capture, *, err: bool = False) -> None:
        self._api, self._id, self._capture, self._err = api, container_id, capture, err
        self._lock = threading.Lock()
        self._stream: Any = None
        self._cancelled = self._cancelled_by_caller = False
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        threading.Thread(
            target=self._run, name=f"bh-follow-{container_id[:12]}", daemon=True
        ).start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            stream = logs(self._api, self._id, err=self._err, follow=True)
            with self._lock:
                self._stream = stream
                if self._cancelled:
                    return
            for chunk in stream:
                if not self._capture.feed(chunk):
                    break
        except BaseException as failure:  # reported to the loop, which decides
            error = failure
        finally:
            self.cancel()
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self._loop.call_soon_threadsafe(self._settle, error)

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
            stream, self._stream = self._stream, None
        if stream is not None:
            close_stream(stream)


class Waiter:
    """Waits for a container's exit with the engine's ``wait`` in a thread of its own
    (it blocks for the whole run), each call bounded by ``WAIT_CALL_S`` and repeated
    until the exit or ``cancel``. ``done`` ends at the exit, or with ``NotFound`` when
    the container was removed, or with the engine's error. The thread owns ``api``
    and closes it."""

    def __init__(self, api: Any, container_id: str) -> None:
        self._api, self._id = api, container_id
        self._cancelled = threading.Event()
        self._loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self._loop.create_future()
        threading.Thread(target=self._run, name=f"bh-wait-{container_id[:12]}", daemon=True).start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            while not self._cancelled.is_set():
                began = time.monotonic()
                try:
                    self._api.wait(self._id, timeout=WAIT_CALL_S)
                    break
                except requests.exceptions.RequestException:
                    if time.monotonic() - began < WAIT_CALL_S:
                        raise  # not the call's own bound: the engine is not answering
        except BaseException as failure:  # reported to the loop, translated there
            error = failure
        finally:
            with contextlib.suppress(Exception):
                self._api.close()
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self._loop.call_soon_threadsafe(self._settle, error)

    def _settle(self, error: BaseException | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(translated(error, "the engine's wait"))

    def cancel(self) -> None:
        """Stop waiting once the call in flight returns (a container that has already
        exited, as when this is called after ``done``, returns at once)."""
        self._cancelled.set()
        if not self.done.done():
            self.done.cancel()


def logs(api: Any, container_id: str, *, err: bool, follow: bool = False) -> Any:
    """The container's stdout (``err``: stderr) log as a stream of raw chunks.

    ``APIClient.logs`` first inspects the container to learn whether it has a TTY —
    one more engine round trip per call, and a run reads two logs and follows one. Ours
    never have one, so the log is read as the multiplexed stream it is (docker-py 7.1's
    own helpers, pinned)."""
    params = {"stdout": not err, "stderr": err, "follow": follow, "timestamps": False}
    response = api._get(api._url("/containers/{0}/logs", container_id), params=params, stream=True)
    return docker.types.daemon.CancellableStream(
        api._get_result_tty(True, response, False), response
    )


def close_stream(stream: Any) -> None:
    with contextlib.suppress(Exception):
        stream.close()  # shuts the socket down: a blocked read returns
    with contextlib.suppress(Exception):
        # ... and the response still holds the socket's file (docker-py 7.1 keeps it in
        # ``CancellableStream._response``): release it too.
        stream._response.close()
