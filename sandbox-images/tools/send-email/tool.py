"""send_email: the sandboxed twin of ``examples.emails.client`` — send one email through
the example email service, or (``BH_MODE=query``) ask whether an operation was sent.

``POST {EMAIL_SERVICE_URL}/messages`` with ``operation_id``/``to``/``subject``/``body``
(the operation id is the service's idempotency key) and the attempt's fence
(``Brainhands-Operation-Id`` and ``Brainhands-Attempt-Deadline``, from
``BH_ATTEMPT_DEADLINE``: the service refuses a send that arrives after it);
``GET /messages/{operation_id}`` is the query (404: never sent). ``EMAIL_SERVICE_URL``
(and optionally ``EMAIL_TIMEOUT``, seconds, default 2) are non-secret config given at
registration. No ``Authorization``
header is ever sent: the egress proxy adds the credentials for the granted destination.

Exit status: 0 with the service's receipt (run) or ``{"found", "output"}`` (query);
75 with ``{"error", "outcome": "unknown"}`` when the message may or may not have been
sent (no answer, timeout, 5xx, unreadable acceptance); 1 with ``{"error", "status"}``
when the service refused (4xx) or the tool is misconfigured. Stdlib only.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

EXIT_UNKNOWN = 75  # EX_TEMPFAIL: verify with the query before trying again
RECEIPT_FIELDS = ("operation_id", "message_id", "status", "to")


class Unknown(Exception):
    """The send may or may not have happened."""


class Refused(Exception):
    """The service answered no (or the tool cannot even ask)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Like the example client: a redirect is an answer, not a hop to follow."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class EmailService:
    """The email service's two calls, over urllib (which honours the proxy variables)."""

    def __init__(self, base_url: str, operation_id: str, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.operation_id = operation_id
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirects())

    def send(self, to: str, subject: str, body: str) -> dict[str, str]:
        payload = {"operation_id": self.operation_id, "to": to, "subject": subject, "body": body}
        fence = {"Brainhands-Operation-Id": self.operation_id}
        deadline = os.environ.get("BH_ATTEMPT_DEADLINE")
        if deadline:
            fence["Brainhands-Attempt-Deadline"] = deadline
        status, content = self._call("POST", "/messages", payload, what="send", fence=fence)
        if status >= 500:
            raise self._unknown(f"service error {status} on the send")
        if status not in (200, 202):
            raise _refused("POST", "/messages", status, content)
        receipt = _receipt(content)
        if receipt is None:
            raise self._unknown("the send was answered with an unreadable body")
        return receipt

    def query(self) -> dict[str, Any]:
        path = f"/messages/{quote(self.operation_id, safe='')}"
        status, content = self._call("GET", path, None, what="query")
        if status == 404:
            return {"found": False, "output": None}
        if status >= 500:
            raise self._unknown(f"service error {status} on the query")
        if status != 200:
            raise _refused("GET", path, status, content)
        receipt = _receipt(content)
        if receipt is None:
            raise Refused(f"email service answered {path} with an unreadable body", status)
        return {"found": True, "output": receipt}

    def _call(
        self,
        method: str,
        path: str,
        payload: Any,
        *,
        what: str,
        fence: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                **(fence or {}),
            },
        )
        print(f"send_email: {method} {self.base_url}{path}", file=sys.stderr, flush=True)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, _read_quietly(error)
        except (OSError, http.client.HTTPException) as error:
            raise self._unknown(f"no answer to the {what} ({_describe(error)})") from None

    def _unknown(self, reason: str) -> Unknown:
        return Unknown(
            f"email operation {self.operation_id!r}: {reason}; it may or may not have been sent"
        )


def main() -> int:
    operation_id = os.environ.get("BH_OPERATION_ID", "")
    mode = os.environ.get("BH_MODE", "run")
    try:
        service = EmailService(_base_url(), _operation(operation_id), _timeout())
        if mode == "query":
            return _emit(service.query(), 0)
        if mode != "run":
            raise Refused(f"BH_MODE must be 'run' or 'query', not {mode!r}")
        return _emit(service.send(*_message()), 0)
    except Unknown as error:
        document = {"error": str(error), "outcome": "unknown", "operation_id": operation_id}
        return _emit(document, EXIT_UNKNOWN)
    except Refused as error:
        return _emit({"error": str(error), "status": error.status}, 1)


def _base_url() -> str:
    url = os.environ.get("EMAIL_SERVICE_URL", "")
    if not url.startswith(("http://", "https://")):
        raise Refused(
            "EMAIL_SERVICE_URL must be the service's http(s) base URL; set it at registration "
            "(bh tools register ... --config EMAIL_SERVICE_URL=http://host:port)"
        )
    return url


def _operation(operation_id: str) -> str:
    if not operation_id:
        raise Refused("BH_OPERATION_ID is not set")
    return operation_id


def _timeout() -> float:
    raw = os.environ.get("EMAIL_TIMEOUT", "2")
    try:
        timeout = float(raw)
    except ValueError:
        timeout = 0.0
    if not timeout > 0:
        raise Refused(f"EMAIL_TIMEOUT must be a number of seconds > 0, not {raw!r}")
    return timeout


def _message() -> tuple[str, str, str]:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        raise Refused(f"BH_ARGUMENTS is not valid JSON: {error}") from None
    if not isinstance(args, dict):
        args = {}
    to, subject, body = (args.get(name) for name in ("to", "subject", "body"))
    if not (isinstance(to, str) and isinstance(subject, str) and isinstance(body, str)):
        raise Refused("the arguments need strings 'to', 'subject' and 'body'")
    return to, subject, body


def _receipt(content: bytes) -> dict[str, str] | None:
    try:
        answer = json.loads(content)
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    if not all(isinstance(answer.get(field), str) for field in RECEIPT_FIELDS):
        return None
    return {field: answer[field] for field in RECEIPT_FIELDS}


def _refused(method: str, path: str, status: int, content: bytes) -> Refused:
    return Refused(
        f"email service refused {method} {path} (HTTP {status}): {_service_message(content)}",
        status,
    )


def _service_message(content: bytes) -> str:
    text = content.decode("utf-8", "replace").strip()
    try:
        body = json.loads(content)
    except ValueError:
        return text[:500] or "(empty body)"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])[:500]
    return text[:500]


def _read_quietly(error: urllib.error.HTTPError) -> bytes:
    try:
        return error.read()
    except (OSError, http.client.HTTPException):
        return b""


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    detail = str(reason if reason is not None else error)
    return f"{type(error).__name__}: {detail}" if detail else type(error).__name__


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
