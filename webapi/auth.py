"""Bearer-token authentication of every route but ``/healthz``, before any routing.

It runs ahead of the router, so nothing — not an unknown route, not a body that fails
to parse — answers an unauthenticated caller with more than 401. Tokens are compared in
constant time and never logged or echoed.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable
from typing import Annotated, Final

from pydantic import AfterValidator, SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

from contracts import ErrorInfo, InvalidInput
from webapi.errors import UNAUTHORIZED, error_response

#: Routes open without a token (they reveal nothing).
OPEN_PATHS = frozenset({"/healthz"})
#: The shortest API token a server starts with.
MIN_TOKEN_LENGTH: Final = 16


def _too_short(token: str) -> bool:
    return len(token.strip()) < MIN_TOKEN_LENGTH


def _long_enough(token: SecretStr) -> SecretStr:
    if _too_short(token.get_secret_value()):
        raise ValueError(f"the API token must have at least {MIN_TOKEN_LENGTH} characters")
    return token


#: An API's bearer token in its settings: at least ``MIN_TOKEN_LENGTH`` characters.
ApiToken = Annotated[SecretStr, AfterValidator(_long_enough)]


def token_from_env(variable: str, api: str) -> str:
    """The token in ``variable``; ``InvalidInput`` saying how to make one when it is
    missing or too short (an API never starts without one)."""
    token = os.environ.get(variable, "")
    if _too_short(token):
        raise InvalidInput(
            f"the {api} will not start without a token: set {variable} to a secret of at "
            f"least {MIN_TOKEN_LENGTH} characters "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return token


class BearerAuth:
    """ASGI middleware: ``Authorization: Bearer <token>`` or 401."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: SecretStr,
        realm: str,
        open_paths: Iterable[str] = OPEN_PATHS,
    ) -> None:
        self.app = app
        self._expected = token.get_secret_value().encode()
        self._open = frozenset(open_paths)
        self._challenge = {"WWW-Authenticate": f'Bearer realm="{realm}"'}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        problem = self._problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        info = ErrorInfo(code=UNAUTHORIZED, message=problem)
        response = error_response(401, info, self._challenge)
        await response(scope, receive, send)

    def _problem(self, scope: Scope) -> str | None:
        """Why the request is not authenticated; None when it is."""
        values = [v for k, v in scope["headers"] if k == b"authorization"]
        if not values:
            return "this route needs an Authorization: Bearer <token> header"
        scheme, _, given = values[0].partition(b" ")
        if len(values) > 1 or scheme.lower() != b"bearer" or not given.strip():
            return "the Authorization header must be exactly one 'Bearer <token>'"
        if not hmac.compare_digest(given.strip(), self._expected):
            return "the bearer token is not valid"
        return None
