"""The HTTP APIs' one error shape: every error as ``{"error": {"code", "message",
"details"}}`` with the stable codes of ``contracts.errors``.

=================================  ======  ==============================================
error                              status  code
=================================  ======  ==============================================
``NotFound``                       404     ``not_found`` (and subclasses' codes)
``PayloadTooLarge``                413     ``payload_too_large``: its size and the limit
``InvalidInput``, bad request      422     ``invalid_input`` naming the field
``Forbidden``                      403     ``forbidden``: the token's scope excludes it
``Refused``, ``ConflictError``     409     ``already_exists``, ``conflict``, ...
``StoreUnavailable``, retryable    503     ``store_unavailable`` (retry later)
``TooManyRequests``                429     ``too_many_requests``, ``Retry-After`` from
                                           ``details.retry_after``
a service's own kinds              theirs  (``install(..., statuses=...)``)
anything else                      500     ``error``; nothing of the cause is sent
=================================  ======  ==============================================

Shared by the Hands API and the Session API (below both services, like ``bus``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
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
from contracts.errors import ErrorBody, Forbidden, PayloadTooLarge, TooManyRequests, Unauthorized

if TYPE_CHECKING:  # FastAPI only for the APIs; workers' probes import this module too
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError

log = logging.getLogger(__name__)

UNAUTHORIZED = Unauthorized.code

Statuses = Sequence[tuple[type[BrainhandsError], int]]

_STATUS: Statuses = (
    (NotFound, 404),
    (Forbidden, 403),
    (PayloadTooLarge, 413),
    (InvalidInput, 422),
    (Refused, 409),
    (ConflictError, 409),
    (StoreUnavailable, 503),
    (TooManyRequests, 429),
)


def status_of(error: BrainhandsError, extra: Statuses = ()) -> int:
    """The HTTP status of an error: a service's own ``extra`` kinds first."""
    for kind, status in (*extra, *_STATUS):
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


def install(app: FastAPI, *, service: str, statuses: Statuses = ()) -> None:
    """Translate every error the app can raise into the one JSON shape; ``service``
    names the API in the answer to an unexpected failure."""
    from fastapi.exceptions import RequestValidationError

    async def brainhands_error(request: Request, error: BrainhandsError) -> JSONResponse:
        status = status_of(error, statuses)
        if status >= 500:
            log.warning(
                "%s %s: %s (%s)", request.method, request.url.path, error.message, error.code
            )
        return error_response(status, error_info(error), _retry_after(error))

    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        # The response says nothing of the cause; the traceback goes to the server log.
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        info = ErrorInfo(
            code=BrainhandsError.code,
            message=f"internal error in the {service}; its log has the details",
        )
        return error_response(500, info)

    app.add_exception_handler(BrainhandsError, brainhands_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, unexpected)


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


def _retry_after(error: BrainhandsError) -> dict[str, str] | None:
    """``Retry-After`` (whole seconds, at least 1) for an error that says when to retry."""
    seconds = error.details.get("retry_after")
    if not isinstance(seconds, (int, float)):
        return None
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


def validation_info(problems: Sequence[Any]) -> ErrorInfo:
    """The first problem named by field (``allow[0]``, ``request_id``), and how many more."""
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
    """("body", "allow", 0) -> ("body", "allow[0]"); ("query", "status") -> ("query", ...)."""
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
