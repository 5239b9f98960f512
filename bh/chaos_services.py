"""The chaos run's scripted model and email service, served in the harness's own process.

Both are wrapped in ``InFlight``, which knows the calls being served and the client port
of each, so a fault can find the Brain process that is inside a model call or a tool
call right now (the client port's owner, from the kernel's socket table) and SIGKILL it
there. Email sends are held a moment before the service sees them, so that a Brain
killed in that window leaves a send whose outcome it never learnt: the worked example's
"accepted but not saved", which recovery must verify by operation id, not send again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from starlette.requests import ClientDisconnect

from brain.model.scripted import Script, scripted_app
from examples.emails.service import EmailService
from examples.emails.wire import Ledger
from webapi.server import serving

log = logging.getLogger(__name__)

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "chaos" / "script.json"
MODEL_CALL = "POST /v1/chat/completions"
EMAIL_SEND = "POST /messages"


class InFlight:
    """ASGI middleware: the requests being served, by the client port that sent them;
    ``hold`` delays the given ``METHOD /path`` requests before the app sees them (a
    caller that gives up meanwhile takes its request with it); ``late`` reads the given
    requests whole, then delays them: the app serves them even when the caller has
    given up (a service that answers after the caller's timeout)."""

    def __init__(self, app: Any, *, hold: dict[str, float] | None = None) -> None:
        self.app = app
        self.hold = hold or {}
        self.late: dict[str, float] = {}
        self._calls: dict[int, tuple[str, int, str]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        what = f"{scope['method']} {scope['path']}"
        client = scope.get("client") or ("", 0)
        key = id(scope)
        headers = dict(scope.get("headers") or ())
        request_id = headers.get(b"x-request-id", b"").decode(errors="replace")
        self._calls[key] = (what, int(client[1]), request_id)
        try:
            if what in self.late:
                receive = await _read_whole(receive)
                await asyncio.sleep(self.late[what])
            await asyncio.sleep(self.hold.get(what, 0))
            await self.app(scope, receive, send)
        except ClientDisconnect:
            # the caller was killed mid-request (what the in-call faults do): nobody to
            # answer, and nothing worth a traceback in the harness's output
            log.debug("%s: the client went away mid-request", what)
        finally:
            self._calls.pop(key, None)

    def calls(self, what: str) -> list[tuple[int, str]]:
        """``what`` calls being served: client port, and the caller's ``X-Request-Id``."""
        return [(port, rid) for called, port, rid in self._calls.values() if called == what]


async def _read_whole(receive: Any) -> Any:
    """The request's body read now, and a ``receive`` that gives it again (then waits
    as the server's would, until the client goes)."""
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body"):
            break

    async def replay() -> Any:
        if messages:
            return messages.pop(0)
        return await receive()

    return replay


def owner_of(client_port: int) -> int | None:
    """The process whose loopback socket has ``client_port`` (not this one)."""
    for connection in psutil.net_connections(kind="tcp"):
        local = connection.laddr
        if local and local.port == client_port and connection.pid not in (None, os.getpid()):
            return connection.pid
    return None


@dataclass
class ChaosServices:
    model_url: str
    model_token: str
    model: InFlight
    email_url: str
    email_token: str
    email: InFlight
    email_service: EmailService
    #: the Docker ``count`` tool's ledger: an email service, one message per tally
    tally_url: str
    tally_token: str
    tally_service: EmailService

    def brain_env(self) -> dict[str, str]:
        return {
            "BH_MODEL_BASE_URL": f"{self.model_url}/v1",
            "BH_MODEL_API_KEY": self.model_token,
            "BH_MODEL_NAME": "scripted-chaos",
            "BH_EMAIL_SERVICE_URL": self.email_url,
            "BH_EMAIL_SERVICE_TOKEN": self.email_token,
        }

    def ledger(self) -> Ledger:
        return self.email_service.book.snapshot()

    def tallies(self) -> Ledger:
        return self.tally_service.book.snapshot()


@asynccontextmanager
async def chaos_services(*, email_hold: float = 0.3) -> AsyncIterator[ChaosServices]:
    model_token, email_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    model = InFlight(scripted_app(Script.load(SCRIPT), token=model_token))
    service = EmailService(token=email_token)
    email = InFlight(service.app(), hold={EMAIL_SEND: email_hold})
    tally_token = secrets.token_urlsafe(24)
    tallies = EmailService(token=tally_token)
    async with (
        serving(model) as model_url,
        serving(email) as email_url,
        serving(tallies.app()) as tally_url,
    ):
        yield ChaosServices(
            model_url,
            model_token,
            model,
            email_url,
            email_token,
            email,
            service,
            tally_url,
            tally_token,
            tallies,
        )
