"""``/v1/tools``: register a tool image, list and inspect the registered definitions,
change a tool's network grant, read its revisions.

Registration reads the image's labels through the sandbox (the local engine), pins the
image by id and records the definition once per ``name@version``: the same request
again answers 200 with the record; an image rebuilt from the same recipe is a new
revision (201); another image — or other grants for the same image — under a
registered version is refused (409 ``already_exists``). The image's ``network`` label
grants nothing: what it names and the definition does not allow is answered in the
``Brainhands-Ungranted-Network`` header. A grant change is a revision with who (the
token, and ``by``) and why; two made at once: one is 409 ``conflict``. Registering and
changing grants need an admin token of the whole deployment.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from contracts import NotFound
from contracts.errors import ErrorBody
from contracts.tool import ToolDefinition, ToolName, ToolRevision
from hands.api.context import ApiContext
from hands.api.registration import UNGRANTED_HEADER, register_request, ungranted_notice
from hands.api.views import GrantRequest, RegisterRequest, ToolHistory, ToolList
from session_store import SessionStore
from webapi.auth import Access, Grant
from webapi.scopes import needs

log = logging.getLogger(__name__)

NameParam = Annotated[ToolName, Path(description="The tool's name.")]
VersionParam = Annotated[int | None, Query(ge=1, description="A version (default: newest).")]

Admin = Annotated[Grant, needs(Access.ADMIN, deployment=True)]
Reader = Annotated[Grant, needs(Access.READ)]

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such tool or version"}
}
_UNGRANTED = {
    UNGRANTED_HEADER: {
        "description": "What the image's network label names that the definition does not "
        "allow (`host:port, …`; absent: nothing): shown, never granted",
        "schema": {"type": "string"},
    }
}
_REGISTER_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ToolDefinition,
        "description": "Already registered, identically",
        "headers": _UNGRANTED,
    },
    201: {
        "model": ToolDefinition,
        "description": "Registered, or rebuilt: a new revision",
        "headers": _UNGRANTED,
    },
    404: {"model": ErrorBody, "description": "No such image on this host's engine"},
    409: {"model": ErrorBody, "description": "That version is registered otherwise"},
    422: {"model": ErrorBody, "description": "A label or field is missing or invalid"},
}
_GRANT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_NOT_FOUND,
    200: {"model": ToolRevision, "description": "Granted so already: nothing changed"},
    201: {"model": ToolRevision, "description": "The new revision"},
    409: {"model": ErrorBody, "description": "Changed meanwhile: read it again, retry"},
}


def tools_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/tools", tags=["tools"])

    @router.post("", status_code=201, responses=_REGISTER_RESPONSES)
    async def register_tool(body: RegisterRequest, response: Response, _: Admin) -> ToolDefinition:
        """Register an image present on this host's engine, by the labels it declares,
        granted only the destinations in ``allow``."""
        registered = await register_request(context.store, context.sandbox, body, caps=context.caps)
        if not registered.created:
            response.status_code = 200
        if registered.ungranted:
            response.headers[UNGRANTED_HEADER] = ", ".join(registered.ungranted)
            notice = ungranted_notice(registered.tool, registered.ungranted)
            log.info("tool %s: %s", registered.tool.ref, notice)
        return registered.tool

    @router.get("")
    async def list_tools(_: Reader) -> ToolList:
        """Every registered definition (its current revision), by name, then version."""
        return ToolList(tools=await context.store.tools.definitions())

    @router.get("/{name}", responses=_NOT_FOUND)
    async def get_tool(name: NameParam, _: Reader, version: VersionParam = None) -> ToolDefinition:
        """One definition as the Hands run it now: ``version``, or the newest."""
        return await _current(context.store, name, version)

    @router.post("/{name}/grant", status_code=201, responses=_GRANT_RESPONSES)
    async def grant_tool(
        name: NameParam, body: GrantRequest, response: Response, caller: Admin
    ) -> ToolRevision:
        """Change what ``name@version`` may reach, without a new image or version."""
        by = caller.name if body.by is None else f"{body.by} (token {caller.name})"
        revision, changed = await context.store.tools.grant(
            name, body.version, body.network, by=by, reason=body.reason, expected=body.revision
        )
        if not changed:
            response.status_code = 200
        return revision

    @router.get("/{name}/history", responses=_NOT_FOUND)
    async def tool_history(name: NameParam, _: Reader, version: VersionParam = None) -> ToolHistory:
        """Every revision of ``version`` (default: the newest), oldest first."""
        definition = await _current(context.store, name, version)
        revisions = await context.store.tools.history(name, definition.version)
        return ToolHistory(tool=definition.ref, revisions=revisions)

    return router


async def _current(store: SessionStore, name: str, version: int | None) -> ToolDefinition:
    definition = await store.tools.get(name, version)
    if definition is None:
        where = name if version is None else f"{name}@{version}"
        raise NotFound(f"tool {where} is not registered", tool=name, version=version)
    return definition
