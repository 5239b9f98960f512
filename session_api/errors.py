"""Errors at the HTTP boundary: every one answers ``{"error": {code, message, details}}``.

==============================  ======  =============================================
raised                          status  code
==============================  ======  =============================================
missing or wrong bearer token   401     ``unauthorized``
``NotFound`` (+ unknown route)  404     ``not_found`` (or the subclass's code)
``InvalidInput``                422     ``invalid_input`` (or the subclass's code)
bad JSON, field, type, value    422     ``invalid_input``, naming the field
``Refused``, ``ConflictError``  409     the error's code (``already_exists``...)
``StoreUnavailable``            503     ``store_unavailable``
other retryable errors          503     the error's code
other ``BrainhandsError``       500     the error's code and message
anything else                   500     ``error`` — details only in the server log
==============================  ======  =============================================

The same table as the Hands API's (``hands.api.errors``), kept as a copy so that this
service does not import the Hands' modules (its executor, bus and metrics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from contracts import (
    BrainhandsError,
    ConflictError,
    ErrorInfo,
    InvalidInput,
    NotFound,
    Refused,
    StoreUnavailable,
)
from session_api.views import ErrorBody

log = logging.getLogger(__name__)

UNAUTHORIZED: Final = "unauthorized"

_STATUS: tuple[tuple[type[BrainhandsError], int], ...] = (
    (NotFound, 404),
    (InvalidInput, 422),
    (Refused, 409),
    (ConflictError, 409),
    (StoreUnavailable, 503),
)


def status_of(error: BrainhandsError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 503 if error.retryable else 500


def error_info(error: BrainhandsError) -> ErrorInfo:
    return ErrorInfo(code=error.code, message=error.message, details=_jsonable(error.details))


def error_response(
    status: int, info: ErrorInfo, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=info).model_dump(mode="json")
    return JSONResponse(body, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Translate every error the app can raise into the one JSON shape."""
    app.add_exception_handler(BrainhandsError, _brainhands_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _brainhands_error(request: Request, error: BrainhandsError) -> JSONResponse:
    status = status_of(error)
    if status >= 500:
        log.warning("%s %s: %s (%s)", request.method, request.url.path, error.message, error.code)
    return error_response(status, error_info(error))


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    return error_response(422, validation_info(error.errors()))


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    if error.status_code == 404:
        code, message = NotFound.code, f"no route {request.method} {request.url.path}"
    elif error.status_code == 405:
        code, message = InvalidInput.code, f"{request.method} is not allowed on this route"
    else:
        code, message = _code_for(error.status_code), str(error.detail)
    return error_response(error.status_code, ErrorInfo(code=code, message=message))


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    # The response says nothing of the cause; the traceback goes to the server log.
    log.error("%s %s failed", request.method, request.url.path, exc_info=error)
    info = ErrorInfo(
        code=BrainhandsError.code,
        message="internal error in the Session API; its log has the details",
    )
    return error_response(500, info)


def validation_info(problems: Sequence[Any]) -> ErrorInfo:
    """The first problem named by field (``request_id``, ``input``), and how many more."""
    first: dict[str, Any] = dict(problems[0]) if problems else {"msg": "invalid request"}
    loc = tuple(first.get("loc", ()))
    of_key = loc[-1:] == ("[key]",)
    location, field = _where(loc[:-1] if of_key else loc)
    kind, said = first.get("type"), first.get("msg")
    if kind == "json_invalid":
        message = f"the request body is not valid JSON ({first.get('ctx', {}).get('error', '')})"
        field = "(body)"
    elif field == "(body)":
        message = (
            "this route needs a JSON request body"
            if kind == "missing"
            else f"the request body must be a JSON object: {said}"
        )
    elif of_key:
        message = f"{location} field {field!r} is invalid: its name: {said}"
    else:
        message = f"{location} field {field!r} is invalid: {said}"
    details = {"field": field, "location": location, "problems": len(problems)}
    return ErrorInfo(code=InvalidInput.code, message=message, details=details)


def _where(loc: tuple[Any, ...]) -> tuple[str, str]:
    """("body", "input", 0) -> ("body", "input[0]"); ("path", "session_id") -> ..."""
    location = str(loc[0]) if loc else "body"
    field = ""
    for part in loc[1:]:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    return location, field or "(body)"


def _code_for(status: int) -> str:
    if status == 401:
        return UNAUTHORIZED
    return InvalidInput.code if status < 500 else BrainhandsError.code


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    """Details are JSON-serialisable by contract; a slip must not turn into a 500."""
    try:
        json.dumps(details)
    except (TypeError, ValueError):
        return {key: str(value) for key, value in details.items()}
    return details
