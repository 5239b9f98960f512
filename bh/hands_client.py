"""A small typed async client of the Hands HTTP API (``docs/hands-api.md``).

``async with HandsClient(url, token) as hands: await hands.operation("op-1")``. Error
answers come back as the project's errors, rebuilt from their stable codes
(``BrainhandsError.from_info``): ``NotFound``, ``InvalidInput``, ``AlreadyExists``...;
a 401 is ``Unauthorized``; an unreachable API is ``StoreUnavailable`` (retryable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from pydantic import JsonValue

from bh.api_client import ApiClient
from contracts import (
    OperationStatus,
    SettleRequest,
)
from contracts.model import Frozen
from contracts.tool import Destination, ToolDefinition, ToolRevision
from hands.api.registration import UNGRANTED_HEADER, request_of
from hands.api.views import (
    CancelRequest,
    GrantRequest,
    OperationList,
    OperationView,
    ToolHistory,
    ToolList,
    Verification,
    checked,
)

_M = TypeVar("_M", bound=Frozen)


class Registration(Frozen):
    """A registered tool, and whether this request changed the catalog (registered it,
    or recorded a revision for an image rebuilt from the same recipe); else it already
    was, identically. ``ungranted``: what the image's ``network`` label names that the
    tool is not granted (shown, never granted)."""

    tool: ToolDefinition
    created: bool
    ungranted: tuple[Destination, ...] = ()


class HandsClient(ApiClient):
    what = "Hands API"
    url_variable = "BH_HANDS_API_URL"
    token_variable = "BH_HANDS_API_TOKEN"

    # -- operations ------------------------------------------------------------------

    async def operation(self, operation_id: str) -> OperationView:
        response = await self._request("GET", f"/v1/operations/{operation_id}")
        return self._parse(OperationView, response)

    async def operations(
        self,
        *,
        session: str | None = None,
        status: OperationStatus | str | None = None,
        limit: int | None = None,
    ) -> OperationList:
        """A session's operations; without ``session``, those of active sessions."""
        params = {
            key: str(value)
            for key, value in (("session", session), ("status", status), ("limit", limit))
            if value is not None
        }
        response = await self._request("GET", "/v1/operations", params=params)
        return self._parse(OperationList, response)

    async def cancel(self, operation_id: str, reason: str | None = None) -> OperationView:
        body = CancelRequest() if reason is None else CancelRequest(reason=reason)
        response = await self._request(
            "POST", f"/v1/operations/{operation_id}/cancel", json=body.model_dump()
        )
        return self._parse(OperationView, response)

    async def settle(
        self, operation_id: str, *, outcome: str, reason: str, output: JsonValue = None
    ) -> OperationView:
        """Record a decision on an ``uncertain`` operation (as this token's name)."""
        body = SettleRequest.model_validate(
            {"outcome": outcome, "reason": reason, "output": output}
        )
        response = await self._request(
            "POST", f"/v1/operations/{operation_id}/settle", json=body.model_dump(mode="json")
        )
        return self._parse(OperationView, response)

    async def verify(self, operation_id: str) -> Verification:
        response = await self._request("POST", f"/v1/operations/{operation_id}/verify")
        return self._parse(Verification, response)

    # -- tools -----------------------------------------------------------------------

    async def register_tool(
        self,
        image: str,
        *,
        allow: Sequence[str] = (),
        config: Mapping[str, str] | None = None,
        registered_by: str | None = None,
    ) -> Registration:
        request = request_of(image, allow=allow, config=config, registered_by=registered_by)
        response = await self._request("POST", "/v1/tools", json=request.model_dump())
        tool = self._parse(ToolDefinition, response)
        named = response.headers.get(UNGRANTED_HEADER, "")
        ungranted = tuple(part.strip() for part in named.split(",") if part.strip())
        return Registration(tool=tool, created=response.status_code == 201, ungranted=ungranted)

    async def grant_tool(
        self,
        name: str,
        version: int,
        *,
        allow: Sequence[str],
        by: str,
        reason: str,
        revision: int | None = None,
    ) -> ToolRevision:
        """Change what ``name@version`` may reach (``allow`` empty: no network); the
        revision now current. ``revision``: only if it is still the current one."""
        fields = {"version": version, "allow": list(allow), "by": by, "reason": reason}
        request = checked(GrantRequest, {**fields, "revision": revision})
        response = await self._request(
            "POST", f"/v1/tools/{name}/grant", json=request.model_dump(exclude_none=True)
        )
        return self._parse(ToolRevision, response)

    async def tool_history(self, name: str, version: int | None = None) -> ToolHistory:
        params = {} if version is None else {"version": str(version)}
        response = await self._request("GET", f"/v1/tools/{name}/history", params=params)
        return self._parse(ToolHistory, response)

    async def tools(self) -> list[ToolDefinition]:
        return self._parse(ToolList, await self._request("GET", "/v1/tools")).tools

    async def tool(self, name: str, version: int | None = None) -> ToolDefinition:
        params = {} if version is None else {"version": str(version)}
        response = await self._request("GET", f"/v1/tools/{name}", params=params)
        return self._parse(ToolDefinition, response)

    # -- service ---------------------------------------------------------------------

    async def metrics(self) -> str:
        return (await self._request("GET", "/metrics")).text
