"""The example email service: a small real HTTP service standing in for a provider such as
SendGrid, for the five-emails example, its crash tests and the demo.

Sends are idempotent by ``operation_id`` (a repeat with the same content gets the original
answer and sends nothing), ``GET /messages/{operation_id}`` is the query entry point that
verifies an uncertain send, a send that carries its attempt's fence
(``contracts.attempt``) is refused, unsent, once that attempt's deadline has passed (409,
counted in the ledger's ``late``), and a fault switch (``POST /faults``) makes the service accept
sends but drop the responses, so callers meet a genuinely unknown outcome.

Run it as a process::

    BH_EMAIL_SERVICE_TOKEN=... python -m examples.emails.service --port N [--ledger FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from brain.model.serving import run_app
from contracts.attempt import AttemptFence
from contracts.errors import InvalidInput
from contracts.model import utcnow
from examples.emails.wire import Faults, Ledger, SendRequest, SentMessage

TOKEN_VAR = "BH_EMAIL_SERVICE_TOKEN"
_TRANSPORT = "brainhands.transport"

_Body = TypeVar("_Body", bound=BaseModel)


class LedgerBook:
    """What the service has sent and how often each operation was requested.

    With a path, the book is reloaded at start and rewritten (temp file, then ``os.replace``)
    after every change, so a restarted service remembers what it sent.
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = asyncio.Lock()
        self.messages: dict[str, SentMessage] = {}
        self.requests: dict[str, int] = {}
        self.late: dict[str, int] = {}
        if path is not None and path.exists():
            self._load(path)

    def snapshot(self) -> Ledger:
        return Ledger(
            messages=tuple(self.messages.values()),
            requests=dict(self.requests),
            late=dict(self.late),
        )

    def count(self, operation_id: str) -> None:
        self.requests[operation_id] = self.requests.get(operation_id, 0) + 1

    def record(self, request: SendRequest) -> SentMessage:
        message = SentMessage(
            operation_id=request.operation_id,
            message_id=f"msg_{uuid.uuid4().hex[:20]}",
            to=request.to,
            subject=request.subject,
            body=request.body,
            sent_at=utcnow(),
        )
        self.messages[request.operation_id] = message
        return message

    async def persist(self) -> None:
        if self._path is None:
            return
        # Serialised under the lock so that the newest snapshot is always written last.
        async with self._lock:
            await asyncio.to_thread(_write_atomically, self._path, self.snapshot())

    def _load(self, path: Path) -> None:
        try:
            ledger = Ledger.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            raise InvalidInput(f"cannot load the email ledger {path}: {exc}") from None
        self.messages = {message.operation_id: message for message in ledger.messages}
        self.requests = dict(ledger.requests)
        self.late = dict(ledger.late)


class EmailService:
    """Routes and state of one email service instance."""

    def __init__(self, *, token: str, ledger_path: Path | None = None) -> None:
        self.book = LedgerBook(ledger_path)
        self.faults = Faults()
        self._token = token

    def app(self) -> Starlette:
        return _TransportAwareStarlette(
            routes=[
                Route("/messages", self._send, methods=["POST"]),
                Route("/messages/{operation_id:path}", self._query, methods=["GET"]),
                Route("/ledger", self._ledger, methods=["GET"]),
                Route("/faults", self._set_faults, methods=["POST"]),
                Route("/faults", self._clear_faults, methods=["DELETE"]),
                Route("/healthz", _health, methods=["GET"]),
            ]
        )

    async def _send(self, request: Request) -> Response:
        if not self._authorized(request):
            return _unauthorized()
        send = await _parse(request, SendRequest)
        if isinstance(send, Response):
            return send
        fence = AttemptFence.of(request.headers)
        if fence is not None and fence.late(utcnow()):
            return await self._late(send, fence)
        response = self._accept(send)
        await self.book.persist()
        targeted = self.faults.operation_id in (None, send.operation_id)
        if self.faults.drop_responses and targeted:
            hold = self.faults.hold_seconds
            self.faults = self.faults.model_copy(
                update={"drop_responses": self.faults.drop_responses - 1}
            )
            await _drop_response(request, hold)
        return response

    async def _late(self, send: SendRequest, fence: AttemptFence) -> Response:
        """A send that arrived after its attempt's deadline: refused, nothing sent (the
        attempt may already have been verified and repeated by another executor)."""
        self.book.late[send.operation_id] = self.book.late.get(send.operation_id, 0) + 1
        await self.book.persist()
        return _error(
            409,
            f"the send of {send.operation_id!r} arrived after its attempt's deadline "
            f"({fence.deadline.isoformat()}); it was not sent",
        )

    def _accept(self, send: SendRequest) -> Response:
        self.book.count(send.operation_id)
        sent = self.book.messages.get(send.operation_id)
        if sent is None:
            receipt = self.book.record(send).receipt()
            return JSONResponse(receipt.model_dump(), status_code=202)
        if sent.same_content(send):
            return JSONResponse(sent.receipt().model_dump(), status_code=200)
        return _error(
            409,
            f"operation_id {send.operation_id!r} was already used for a different message "
            "(to, subject or body differ); use a new operation_id for new content",
        )

    async def _query(self, request: Request) -> Response:
        if not self._authorized(request):
            return _unauthorized()
        operation_id = request.path_params["operation_id"]
        sent = self.book.messages.get(operation_id)
        if sent is None:
            return JSONResponse({"operation_id": operation_id, "status": "unknown"}, 404)
        return JSONResponse(sent.receipt().model_dump())

    async def _ledger(self, request: Request) -> Response:
        if not self._authorized(request):
            return _unauthorized()
        return JSONResponse(self.book.snapshot().model_dump(mode="json"))

    async def _set_faults(self, request: Request) -> Response:
        if not self._authorized(request):
            return _unauthorized()
        faults = await _parse(request, Faults)
        if isinstance(faults, Response):
            return faults
        self.faults = faults
        return JSONResponse(faults.model_dump())

    async def _clear_faults(self, request: Request) -> Response:
        if not self._authorized(request):
            return _unauthorized()
        self.faults = Faults()
        return JSONResponse(self.faults.model_dump())

    def _authorized(self, request: Request) -> bool:
        presented = request.headers.get("authorization", "")
        return hmac.compare_digest(presented.encode(), f"Bearer {self._token}".encode())


def email_app(*, token: str, ledger_path: Path | None = None) -> Starlette:
    """The email service as an ASGI app (for ``tests/support/http_server.serve``)."""
    return EmailService(token=token, ledger_path=ledger_path).app()


class _TransportAwareStarlette(Starlette):
    """Starlette that keeps the server's connection transport in the scope.

    ASGI has no message for "drop this connection": an exception before the response
    starts becomes a 500, which is an answer. Under uvicorn the ``send`` callable is bound to
    the request cycle that owns the transport, so the fault switch can abort it for real.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_TRANSPORT] = getattr(getattr(send, "__self__", None), "transport", None)
        await super().__call__(scope, receive, send)


async def _drop_response(request: Request, hold_seconds: float) -> None:
    """Hold the request, then cut the connection so no response ever reaches the client."""
    await asyncio.sleep(hold_seconds)
    abort = getattr(request.scope.get(_TRANSPORT), "abort", None)
    if not callable(abort):
        raise RuntimeError("cannot drop the response: this ASGI server hides its transport")
    abort()
    # Let the server see the lost connection, so the response returned next goes nowhere.
    await asyncio.sleep(0)


async def _parse(request: Request, model: type[_Body]) -> _Body | Response:
    try:
        raw = json.loads(await request.body())
    except ValueError:
        return _error(400, "request body is not valid JSON")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        return _invalid(exc)


def _invalid(exc: ValidationError) -> Response:
    errors = exc.errors()
    fields = [".".join(str(part) for part in error["loc"]) or "(body)" for error in errors]
    problems = "; ".join(
        f"field {field!r}: {error['msg']}" for field, error in zip(fields, errors, strict=True)
    )
    return JSONResponse({"error": f"invalid request: {problems}", "fields": fields}, 422)


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def _unauthorized() -> Response:
    return _error(401, "missing or wrong bearer token")


def _write_atomically(path: Path, ledger: Ledger) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(ledger.model_dump_json(indent=1))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.emails.service",
        description=f"Example email service (bearer token from ${TOKEN_VAR}).",
    )
    parser.add_argument("--port", type=int, required=True, help="TCP port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--ledger", type=Path, help="JSON file that keeps the ledger")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_VAR, "")
    if not token:
        print(f"error: set {TOKEN_VAR} to the bearer token clients must send", file=sys.stderr)
        return 2
    try:
        app = email_app(token=token, ledger_path=args.ledger)
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_app(app, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
