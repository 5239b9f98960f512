"""The console's login: the API token kept in a cookie the page's scripts cannot read,
the CSRF token every form that changes something carries, and the login form's own.

* Forms of a logged-in page carry ``csrf_token(grant)``, an HMAC of the grant's token
  (nothing stored): ``check_form``.
* The login form has no grant yet. Its CSRF token is a random value set with the form in
  a short-lived cookie (``LOGIN_COOKIE``: ``HttpOnly``, ``SameSite=Strict``, sent to
  the login form only) and rendered in the form; a post must carry both, equal (double
  submit: another site can neither read the value nor set our cookie):
  ``check_login_form``. Without it a form on another site could log a victim's browser
  in as the attacker (login CSRF), whose console the victim would then use.
* Every form posted from another origin is refused (``check_origin``): the browser's
  ``Origin`` against the public URL when one is configured (a proxy in front of the API
  terminates TLS and forwards another ``Host``), else against the ``Host`` the request
  names.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Final
from urllib.parse import parse_qs, urlsplit

from fastapi import Request

from contracts.errors import Forbidden
from webapi.auth import CookieLogin, Grant, find_grant

COOKIE: Final = CookieLogin(
    name="bh_console", prefix="/console", login="/console/login", static="/console/static/"
)
#: the login form's CSRF cookie (double submit), sent to the login form only
LOGIN_COOKIE: Final = "bh_login"
#: how long a login form may stay open before its post is refused (and offered again)
LOGIN_FORM_SECONDS: Final = 15 * 60
#: a form body larger than this is not a console form
MAX_FORM_BYTES: Final = 64 * 1024
_CSRF_CONTEXT: Final = b"brainhands console csrf v1"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def csrf_token(grant: Grant) -> str:
    """The CSRF token of the pages served to ``grant`` (derived: nothing is stored)."""
    key = grant.token.get_secret_value().encode()
    return hmac.new(key, _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def login_csrf() -> str:
    """A fresh CSRF token for one login form (its cookie and its field)."""
    return secrets.token_hex(32)


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as single values."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise Forbidden("the form is too large", limit=MAX_FORM_BYTES)
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


def check_origin(request: Request, public_url: str | None) -> None:
    """403 when the browser says the form comes from another origin than this console's
    (``public_url``'s, else the one the request's ``Host`` names)."""
    origin = request.headers.get("origin")
    if origin is None:
        return  # not a browser's cross-site form (they all send it on a POST)
    if public_url is not None:
        same = _origin(origin) == _origin(public_url)
    else:
        same = urlsplit(origin).netloc == request.headers.get("host")
    if not same:
        raise Forbidden("the form was posted from another origin")


def check_form(
    request: Request, form: dict[str, str], grant: Grant, public_url: str | None = None
) -> None:
    """403 unless the form carries this grant's CSRF token and comes from this origin."""
    check_origin(request, public_url)
    given = form.get("csrf", "")
    if not hmac.compare_digest(given.encode(), csrf_token(grant).encode()):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page")


def check_login_form(request: Request, form: dict[str, str], public_url: str | None) -> None:
    """403 unless the login form's CSRF field equals its cookie and it comes from this
    origin."""
    check_origin(request, public_url)
    cookie = request.cookies.get(LOGIN_COOKIE, "")
    given = form.get("csrf", "")
    if not cookie or not hmac.compare_digest(given.encode(), cookie.encode()):
        raise Forbidden("the login form expired or was not this console's: log in again")


def login_grant(grants: Sequence[Grant], token: str) -> Grant | None:
    return find_grant(grants, token.strip().encode())


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port that is not one
        port = -1
    return parts.scheme, (parts.hostname or ""), port
