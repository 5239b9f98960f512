"""Async client of the example email service, translating failures at this boundary.

``send`` raises ``OutcomeUnknown`` whenever the message may have been sent without the
client learning it (timeout, broken connection, 5xx, garbled acceptance); the caller then
verifies with ``query``, which answers ``None`` for an operation the service never saw. A
query whose connection ends before any response is asked once more at once (a read is
safe to repeat; a send never is repeated here).
Refusals (401, 409, 422 and other 4xx) raise ``ToolFailed`` with the service's message.
Sends go through ``brain.attempt.AttemptTransport``: one made under an operation's
attempt is proved again right before it is written and carries the attempt's fence.
The token is only ever sent in the ``Authorization`` header, never put into an error.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, SecretStr, ValidationError

from brain.attempt import AttemptTransport
from contracts.errors import OutcomeUnknown, ToolFailed
from examples.emails.wire import Faults, Ledger, Receipt

__all__ = ["EmailClient", "Ledger", "Receipt"]

_Answer = TypeVar("_Answer", bound=BaseModel)
#: the connection ended before any response came (not a timeout: asking again would
#: only spend a second one)
_NO_RESPONSE = (httpx.NetworkError, httpx.RemoteProtocolError)


class EmailClient:
    """Talks to one email service at ``base_url`` with a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: SecretStr | str,
        *,
        timeout: float = 2.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        secret = token if isinstance(token, SecretStr) else SecretStr(token)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {secret.get_secret_value()}"},
            timeout=timeout,
            # a send made under an operation's attempt is proved at the last moment and
            # carries the attempt's fence (``brain.attempt``)
            transport=AttemptTransport(transport),
        )

    async def __aenter__(self) -> EmailClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, operation_id: str, to: str, subject: str, body: str) -> Receipt:
        """Send one message; repeating an ``operation_id`` with the same content is safe."""
        payload = {"operation_id": operation_id, "to": to, "subject": subject, "body": body}
        try:
            response = await self._http.post("/messages", json=payload)
        except httpx.RequestError as exc:
            raise _unknown(operation_id, f"no answer to the send ({_describe(exc)})") from exc
        if response.status_code >= 500:
            raise _unknown(operation_id, f"service error {response.status_code} on the send")
        if response.status_code not in (200, 202):
            _refused(response, operation=operation_id)
        try:
            return Receipt.model_validate_json(response.content)
        except ValidationError:
            raise _unknown(operation_id, "the send was answered with an unreadable body") from None

    async def query(self, operation_id: str) -> Receipt | None:
        """What the service knows about ``operation_id``; ``None`` if it never sent it."""
        path = f"/messages/{quote(operation_id, safe='')}"
        try:
            try:
                response = await self._http.get(path)
            except _NO_RESPONSE:
                # e.g. a pooled keep-alive connection the server had just closed: a read
                # is safe to ask again at once (a send never is)
                response = await self._http.get(path)
        except httpx.RequestError as exc:
            raise _unknown(operation_id, f"no answer to the query ({_describe(exc)})") from exc
        if response.status_code == 404:
            return None
        if response.status_code >= 500:
            raise _unknown(operation_id, f"service error {response.status_code} on the query")
        if response.status_code != 200:
            _refused(response, operation=operation_id)
        return _read(response, Receipt)

    async def ledger(self) -> Ledger:
        """Everything the service has sent, and how often each operation was requested."""
        return _read(await self._admin("GET", "/ledger"), Ledger)

    async def set_faults(
        self, drop_responses: int, hold_seconds: float = 5.0, *, operation_id: str | None = None
    ) -> None:
        """Make the service accept the next sends (of ``operation_id`` only, when given)
        but drop their responses."""
        faults = Faults(
            drop_responses=drop_responses, hold_seconds=hold_seconds, operation_id=operation_id
        )
        await self._admin("POST", "/faults", json=faults.model_dump())

    async def clear_faults(self) -> None:
        await self._admin("DELETE", "/faults")

    async def _admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.RequestError as exc:
            raise ToolFailed(
                f"email service unreachable on {method} {path} ({_describe(exc)})"
            ) from exc
        if response.status_code != 200:
            _refused(response)
        return response


def _unknown(operation_id: str, reason: str) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"email operation {operation_id!r}: {reason}; it may or may not have been sent",
        operation_id=operation_id,
    )


def _refused(response: httpx.Response, **details: Any) -> NoReturn:
    raise ToolFailed(
        f"email service refused {response.request.method} {response.request.url.path} "
        f"(HTTP {response.status_code}): {_service_message(response)}",
        status=response.status_code,
        **details,
    )


def _read(response: httpx.Response, model: type[_Answer]) -> _Answer:
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ToolFailed(
            f"email service answered {response.request.url.path} with an unreadable body: "
            f"{exc.error_count()} validation error(s)"
        ) from None


def _service_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])[:500]
    return response.text.strip()[:500]


def _describe(exc: httpx.RequestError) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
