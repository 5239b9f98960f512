"""Bearer tokens and their scopes: who may call which route of an API, on which sessions.

``BearerAuth`` authenticates every route but the probes (``/healthz``, ``/livez``,
``/readyz``) ahead of the router, so
nothing — not an unknown route, not a body that fails to parse — answers an
unauthenticated caller with more than 401. Tokens are compared in constant time (with
every configured token, whichever matches) and never logged or echoed.

A token is a ``Grant``: a name (recorded as who decided, e.g. a settle), an ``access``
level and the sessions it covers:

=========  ===================================================================
access     may
=========  ===================================================================
read       look (GET routes) at the sessions and operations it covers
operate    read, and act on them: submit, cancel, verify, settle
admin      operate, and what is the deployment's rather than a session's:
           register tools, metrics (with no session restriction)
=========  ===================================================================

``sessions`` are session-id prefixes and ``tenants`` tenant labels (a tenant ``acme``
covers the sessions ``acme:…``); with neither, a token covers every session. The
single token of ``BH_<API>_TOKEN`` is an unscoped ``admin`` token named ``default``;
``BH_<API>_TOKENS_FILE`` names a JSON file (mode 0600 or 0440) of scoped ones
(``grants_from_env``). Routes check the grant the middleware put on the request
(``grant_of``, ``webapi.scopes``).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field, SecretStr, ValidationError
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from contracts import ErrorInfo, Identifier, InvalidInput
from contracts.model import Frozen
from runtime.credentials import check_private
from webapi.errors import UNAUTHORIZED, error_response

#: Routes open without a token (they reveal nothing).
OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
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
#: Where ``BearerAuth`` puts the caller's ``Grant`` in the ASGI scope.
GRANT_KEY: Final = "brainhands.grant"
#: The name of the single token of ``BH_<API>_TOKEN`` (and of ``create_app(token=)``).
DEFAULT_GRANT: Final = "default"


class Access(StrEnum):
    READ = "read"
    OPERATE = "operate"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Access).index(self)


class Grant(Frozen):
    """One API token and what it may do (see the module docstring)."""

    name: Identifier
    token: ApiToken
    access: Access = Access.ADMIN
    #: session-id prefixes it covers (with ``tenants``; neither: every session)
    sessions: tuple[Annotated[str, Field(min_length=1, max_length=200)], ...] = ()
    #: tenant labels it covers: the tenant ``acme`` covers the sessions ``acme:…``
    tenants: tuple[Identifier, ...] = ()

    @property
    def prefixes(self) -> tuple[str, ...]:
        return (*self.sessions, *(f"{tenant}:" for tenant in self.tenants))

    @property
    def restricted(self) -> bool:
        """Whether it covers only some sessions."""
        return bool(self.prefixes)

    def may(self, access: Access | str) -> bool:
        return self.access.rank >= Access(access).rank

    def covers(self, session_id: str) -> bool:
        prefixes = self.prefixes
        return not prefixes or session_id.startswith(prefixes)


def default_grant(token: SecretStr) -> Grant:
    """The unscoped admin token of a single-token configuration."""
    return Grant(name=DEFAULT_GRANT, token=token)


def grants_from_env(prefix: str, api: str) -> tuple[Grant, ...]:
    """The tokens of ``{prefix}_TOKEN`` (one unscoped token) and ``{prefix}_TOKENS_FILE``
    (scoped ones); ``InvalidInput`` saying how to configure them when there are none or
    one is invalid (an API never starts without a token)."""
    single, path = f"{prefix}_TOKEN", f"{prefix}_TOKENS_FILE"
    env = os.environ
    grants: list[Grant] = []
    if env.get(single, "").strip() or not env.get(path):
        grants.append(default_grant(SecretStr(token_from_env(single, api, also=path))))
    if env.get(path):
        grants.extend(read_grants(Path(env[path]), api))
    return check_grants(grants, api)


def read_grants(path: Path, api: str) -> list[Grant]:
    """The tokens of a JSON file ``{"tokens": [{"name", "token", "access", "sessions",
    "tenants"}]}``, which others must not read (``runtime.credentials.check_private``)."""
    try:
        check_private(path, path.stat().st_mode, f"{api} tokens file")
        document: Any = json.loads(path.read_text())
    except OSError as error:
        raise InvalidInput(f"the {api} tokens file {path} cannot be read: {error}") from None
    except json.JSONDecodeError as error:
        raise InvalidInput(f"the {api} tokens file {path} is not JSON: {error}") from None
    entries = document.get("tokens") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise InvalidInput(f'the {api} tokens file {path} must be {{"tokens": [...]}}')
    grants = []
    for index, entry in enumerate(entries):
        try:
            grants.append(Grant.model_validate(entry))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            name = entry.get("name") if isinstance(entry, dict) else None
            raise InvalidInput(
                f"the {api} tokens file {path}: tokens[{index}] ({name or 'unnamed'}) "
                f"field {where!r} is invalid: {first['msg']}"
            ) from None
    return grants


def check_grants(grants: Sequence[Grant], api: str) -> tuple[Grant, ...]:
    """``grants`` when there is one at least and names and tokens are unique."""
    if not grants:
        raise InvalidInput(f"the {api} needs at least one token")
    names = [grant.name for grant in grants]
    tokens = [grant.token.get_secret_value() for grant in grants]
    for name in names:
        if names.count(name) > 1:
            raise InvalidInput(f"the {api} has two tokens named {name!r}: names are unique")
    if len(set(tokens)) < len(tokens):
        raise InvalidInput(f"the {api} has one token twice: every token is another secret")
    return tuple(grants)


def grants_of(token: SecretStr | None, tokens: Sequence[Grant], api: str) -> tuple[Grant, ...]:
    """An app's grants: ``token`` (unscoped, ``default``) and the scoped ``tokens``."""
    grants = list(tokens)
    if token is not None:
        if _too_short(token.get_secret_value()):
            raise InvalidInput(f"the {api} token must have at least {MIN_TOKEN_LENGTH} characters")
        grants.insert(0, default_grant(token))
    return check_grants(grants, api)


def grant_of(scope: Scope) -> Grant:
    """The grant ``BearerAuth`` authenticated the request with."""
    grant = scope.get(GRANT_KEY)
    if not isinstance(grant, Grant):  # a route outside BearerAuth: a wiring bug
        raise RuntimeError("no grant on the request: BearerAuth must wrap the app")
    return grant


def token_from_env(variable: str, api: str, *, also: str | None = None) -> str:
    """The token in ``variable``; ``InvalidInput`` saying how to make one when it is
    missing or too short (an API never starts without one)."""
    token = os.environ.get(variable, "")
    if _too_short(token):
        other = f" (or {also} to a 0600 file of scoped tokens)" if also else ""
        raise InvalidInput(
            f"the {api} will not start without a token: set {variable} to a secret of at "
            f"least {MIN_TOKEN_LENGTH} characters "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)" + other
        )
    return token


@dataclass(frozen=True)
class CookieLogin:
    """A browser's token, kept in an ``HttpOnly``, ``SameSite=Strict`` cookie ``name``
    after a login form (the web console, ``session_api.console``). It authenticates
    reads (GET, HEAD) anywhere — the console's pages and the event streams they follow
    — and writes under ``prefix`` only, where each form carries a CSRF token; an API
    write with the cookie alone is 401. A page under ``prefix`` without a token is sent
    to ``login``; ``login`` and ``static`` (under ``prefix``) are open."""

    name: str
    prefix: str
    login: str
    static: str

    def is_open(self, path: str) -> bool:
        return path == self.login or path.startswith(self.static)


_SAFE_METHODS = frozenset({"GET", "HEAD"})


class BearerAuth:
    """ASGI middleware: ``Authorization: Bearer <token>`` of one of ``grants`` (or a
    ``CookieLogin`` cookie), or 401; the matching grant goes on the request
    (``grant_of``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        grants: Sequence[Grant],
        realm: str,
        open_paths: Iterable[str] = OPEN_PATHS,
        cookie: CookieLogin | None = None,
    ) -> None:
        self.app = app
        self._grants = tuple(grants)
        if not self._grants:
            raise InvalidInput("an API needs at least one token")
        self._open = frozenset(open_paths)
        self._cookie = cookie
        self._challenge = {"WWW-Authenticate": f'Bearer realm="{realm}"'}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        cookie = self._cookie
        if scope["type"] != "http" or path in self._open or (cookie and cookie.is_open(path)):
            await self.app(scope, receive, send)
            return
        grant, problem = self._check(scope)
        if grant is not None:
            await self.app({**scope, GRANT_KEY: grant}, receive, send)
            return
        to_login = cookie is not None and path.startswith(cookie.prefix)
        if to_login and scope["method"] in _SAFE_METHODS:
            assert cookie is not None
            await RedirectResponse(cookie.login, 303)(scope, receive, send)
            return
        info = ErrorInfo(code=UNAUTHORIZED, message=problem)
        response = error_response(401, info, self._challenge)
        await response(scope, receive, send)

    def _check(self, scope: Scope) -> tuple[Grant | None, str]:
        """The grant of the request's token, or why the request is not authenticated."""
        values = [v for k, v in scope["headers"] if k == b"authorization"]
        if not values:
            return self._from_cookie(scope)
        scheme, _, given = values[0].partition(b" ")
        if len(values) > 1 or scheme.lower() != b"bearer" or not given.strip():
            return None, "the Authorization header must be exactly one 'Bearer <token>'"
        found = self._match(given.strip())
        return found, "" if found is not None else "the bearer token is not valid"

    def _from_cookie(self, scope: Scope) -> tuple[Grant | None, str]:
        missing = "this route needs an Authorization: Bearer <token> header"
        cookie = self._cookie
        if cookie is None:
            return None, missing
        safe = scope["method"] in _SAFE_METHODS
        if not safe and not scope["path"].startswith(cookie.prefix):
            return None, missing  # an API write never rides on a browser's cookie
        jar = SimpleCookie()
        for key, value in scope["headers"]:
            if key == b"cookie":
                with contextlib.suppress(CookieError):
                    jar.load(value.decode("latin-1"))
        morsel = jar.get(cookie.name)
        if morsel is None or not morsel.value:
            return None, missing
        found = self._match(morsel.value.encode())
        return found, "" if found is not None else "the console's token is not valid"

    def _match(self, given: bytes) -> Grant | None:
        return find_grant(self._grants, given)


def find_grant(grants: Sequence[Grant], given: bytes) -> Grant | None:
    """The grant whose token is ``given``; every one is compared (in constant time), so
    the time tells nothing about which nearly matched."""
    found = None
    for grant in grants:
        if hmac.compare_digest(given, grant.token.get_secret_value().encode()) and found is None:
            found = grant
    return found
