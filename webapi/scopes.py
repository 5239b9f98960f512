"""What a route needs of its caller's token (``webapi.auth.Grant``), as FastAPI
dependencies and checks; every route of both APIs declares its access with ``needs``.

Why 403 for a session and 404 for an operation: whether a token covers a session is a
function of the session id alone (a prefix, a tenant label), so refusing a session
named in the path says nothing about what exists — 403 ``forbidden`` says why. Whether
it covers an *operation* depends on the operation's session, which only the store
knows: a 403 would tell another tenant that the operation exists, so the answer is the
404 of an operation that does not. A missing access level (a read token cancelling) is
403 before anything is looked up.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from contracts import NotFound, Operation
from contracts.errors import Forbidden
from webapi.auth import Access, Grant, grant_of


def needs(access: Access, *, deployment: bool = False) -> Any:
    """A dependency giving the caller's grant, refusing (403) a token below ``access``
    or, for the ``deployment``'s routes (not a session's), one limited to some sessions."""

    async def caller(request: Request) -> Grant:
        grant = grant_of(request.scope)
        if not grant.may(access):
            raise Forbidden(
                f"the token {grant.name!r} has {grant.access.value} access; "
                f"{request.method} {request.url.path} needs {access.value}",
                token=grant.name,
                needs=access.value,
            )
        if deployment and grant.restricted:
            raise Forbidden(
                f"the token {grant.name!r} covers only some sessions; "
                f"{request.url.path} is the whole deployment's: use an unscoped token",
                token=grant.name,
            )
        return grant

    return Depends(caller)


def check_session(grant: Grant, session_id: str) -> None:
    """403 unless ``grant`` covers the session (a function of the id alone)."""
    if not grant.covers(session_id):
        raise Forbidden(
            f"the token {grant.name!r} does not cover session {session_id!r}: it covers "
            f"the sessions starting with {', '.join(map(repr, grant.prefixes))}",
            token=grant.name,
            session_id=session_id,
        )


def visible(grant: Grant, operation: Operation | None, operation_id: str) -> Operation:
    """The operation when ``grant`` covers its session; else the 404 of a missing one."""
    if operation is None or not grant.covers(operation.session_id):
        raise NotFound(f"operation {operation_id!r} is not on record", operation_id=operation_id)
    return operation
