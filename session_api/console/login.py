"""The console's login: the API token kept in a cookie the page's scripts cannot read,
and the CSRF token every form that changes something carries."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Final
from urllib.parse import parse_qs, urlsplit

from fastapi import Request

from contracts.errors import Forbidden
from webapi.auth import CookieLogin, Grant

COOKIE: Final = CookieLogin(
    name="bh_console", prefix="/console", login="/console/login", static="/console/static/"
)
#: a form body larger than this is not a console form
MAX_FORM_BYTES: Final = 64 * 1024
_CSRF_CONTEXT: Final = b"brainhands console csrf v1"


def csrf_token(grant: Grant) -> str:
    """The CSRF token of the pages served to ``grant`` (derived: nothing is stored)."""
    key = grant.token.get_secret_value().encode()
    return hmac.new(key, _CSRF_CONTEXT, hashlib.sha256).hexdigest()


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as single values."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise Forbidden("the form is too large", limit=MAX_FORM_BYTES)
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


def check_form(request: Request, form: dict[str, str], grant: Grant) -> None:
    """403 unless the form carries this grant's CSRF token and, when the browser says
    where the request comes from, it comes from this very origin."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("the form was posted from another origin")
    given = form.get("csrf", "")
    if not hmac.compare_digest(given.encode(), csrf_token(grant).encode()):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page")


def login_grant(grants: Sequence[Grant], token: str) -> Grant | None:
    from webapi.auth import find_grant

    return find_grant(grants, token.strip().encode())
