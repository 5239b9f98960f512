"""``/v1/tools``: register a tool image, list and inspect the registered definitions.

Registration reads the image's labels through the sandbox (the local engine), pins the
image by id and records the definition create-once per ``name@version``: the same
request again answers 200 with the record; another image — or other grants for the same
image — under a registered version is refused (409 ``already_exists``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from contracts import NotFound
from contracts.errors import ErrorBody
from contracts.tool import ToolDefinition, ToolName
from hands.api.context import ApiContext
from hands.api.registration import register_request
from hands.api.views import RegisterRequest, ToolList
from webapi.auth import Access, Grant
from webapi.scopes import needs

NameParam = Annotated[ToolName, Path(description="The tool's name.")]
VersionParam = Annotated[int | None, Query(ge=1, description="A version (default: newest).")]

_REGISTER_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": ToolDefinition, "description": "Already registered, identically"},
    404: {"model": ErrorBody, "description": "No such image on this host's engine"},
    409: {"model": ErrorBody, "description": "That version is registered otherwise"},
    422: {"model": ErrorBody, "description": "A label or field is missing or invalid"},
}


def tools_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/tools", tags=["tools"])

    @router.post("", status_code=201, responses=_REGISTER_RESPONSES)
    async def register_tool(
        body: RegisterRequest,
        response: Response,
        _: Annotated[Grant, needs(Access.ADMIN, deployment=True)],
    ) -> ToolDefinition:
        """Register an image present on this host's engine, by the labels it declares."""
        definition, created = await register_request(
            context.store, context.sandbox, body, caps=context.caps
        )
        if not created:
            response.status_code = 200
        return definition

    @router.get("")
    async def list_tools(_: Annotated[Grant, needs(Access.READ)]) -> ToolList:
        """Every registered definition, by name, then version."""
        return ToolList(tools=await context.store.tools.definitions())

    @router.get("/{name}", responses={404: {"model": ErrorBody, "description": "Unknown"}})
    async def get_tool(
        name: NameParam,
        _: Annotated[Grant, needs(Access.READ)],
        version: VersionParam = None,
    ) -> ToolDefinition:
        """One definition: ``version``, or the newest."""
        definition = await context.store.tools.get(name, version)
        if definition is None:
            where = name if version is None else f"{name}@{version}"
            raise NotFound(f"tool {where} is not registered", tool=name, version=version)
        return definition

    return router
