"""The scripted model server (``brain.model.scripted``) with a probe: when each completion
request arrived and ended, tagged with its conversation's first user message, and the
most requests that were in flight at once. Benchmarks run it as its own process (Brains
are killed around it) and read ``GET /probe``; ``POST /probe/reset`` forgets.

    BH_SCRIPTED_MODEL_TOKEN=... python -m bench.model_probe --script FILE --port N
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from brain.model.scripted import TOKEN_VAR, Script, scripted_app
from brain.model.serving import run_app


@dataclass
class Probe:
    """What the server saw: one record per completion request, and the in-flight peak."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0

    def report(self) -> dict[str, Any]:
        return {"peak": self.peak, "in_flight": self.in_flight, "requests": self.requests}


class Probed:
    """ASGI wrapper around the scripted app recording completion requests."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner
        self.probe = Probe()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/probe":
            await self._probe(scope, send)
        elif path.endswith("/chat/completions"):
            await self._completion(scope, receive, send)
        else:
            await self.inner(scope, receive, send)

    async def _completion(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        record = {"tag": _tag(body), "arrived": time.time(), "ended": None}
        self.probe.requests.append(record)
        self.probe.in_flight += 1
        self.probe.peak = max(self.probe.peak, self.probe.in_flight)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            await self.inner(scope, replay, send)
        finally:
            self.probe.in_flight -= 1
            record["ended"] = time.time()

    async def _probe(self, scope: Scope, send: Send) -> None:
        if scope["method"] == "POST":
            self.probe = Probe(in_flight=self.probe.in_flight)
        payload = json.dumps(self.probe.report()).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


async def _read_body(receive: Receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = bool(message.get("more_body"))
    return b"".join(chunks)


def _tag(body: bytes) -> str:
    """The conversation's first user message: benchmarks put the session id in it."""
    try:
        messages = json.loads(body).get("messages", [])
        return next(str(m.get("content")) for m in messages if m.get("role") == "user")
    except (ValueError, AttributeError, StopIteration):
        return ""


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_probe", description=__doc__)
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = Probed(scripted_app(Script.load(args.script), token=os.environ[TOKEN_VAR]))
    run_app(app, host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
