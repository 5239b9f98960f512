"""A small typed async client of the Hands HTTP API (``docs/hands-api.md``).

``async with HandsClient(url, token) as hands: await hands.operation("op-1")``. Error
answers come back as the project's errors, rebuilt from their stable codes
(``BrainhandsError.from_info``): ``NotFound``, ``InvalidInput``, ``AlreadyExists``...;
a 401 is ``Unauthorized``; an unreachable API is ``StoreUnavailable`` (retryable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import SecretStr, TypeAdapter, ValidationError

from contracts import (
    BrainhandsError,
    ErrorInfo,
    InvalidInput,
    NotFound,
    OperationStatus,
    StoreUnavailable,
)
from contracts.errors import ErrorBody
from contracts.model import Frozen
from contracts.tool import ToolDefinition
from hands.api.registration import request_of
from hands.api.views import (
    CancelRequest,
    OperationList,
    OperationView,
    ToolList,
    Verification,
)

_M = TypeVar("_M", bound=Frozen)
_ERROR_BODY: TypeAdapter[ErrorBody] = TypeAdapter(ErrorBody)


class Unauthorized(BrainhandsError):
    """The API refused the token (HTTP 401)."""

    code = "unauthorized"


class Registration(Frozen):
    """A registered tool, and whether this request registered it (else: it already was,
    identically)."""

    tool: ToolDefinition
    created: bool


class HandsClient:
    def __init__(
        self,
        base_url: str,
        token: str | SecretStr,
        *,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        if not base_url:
            raise InvalidInput("the Hands API URL is empty: set BH_HANDS_API_URL or --api-url")
        if not secret:
            raise InvalidInput("the Hands API needs a token: set BH_HANDS_API_TOKEN or --token")
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {secret}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> HandsClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    # -- operations ------------------------------------------------------------------

    async def operation(self, operation_id: str) -> OperationView:
        response = await self._request("GET", f"/v1/operations/{operation_id}")
        return _parse(OperationView, response)

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
        return _parse(OperationList, response)

    async def cancel(self, operation_id: str, reason: str | None = None) -> OperationView:
        body = CancelRequest() if reason is None else CancelRequest(reason=reason)
        response = await self._request(
            "POST", f"/v1/operations/{operation_id}/cancel", json=body.model_dump()
        )
        return _parse(OperationView, response)

    async def verify(self, operation_id: str) -> Verification:
        response = await self._request("POST", f"/v1/operations/{operation_id}/verify")
        return _parse(Verification, response)

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
        tool = _parse(ToolDefinition, response)
        return Registration(tool=tool, created=response.status_code == 201)

    async def tools(self) -> list[ToolDefinition]:
        return _parse(ToolList, await self._request("GET", "/v1/tools")).tools

    async def tool(self, name: str, version: int | None = None) -> ToolDefinition:
        params = {} if version is None else {"version": str(version)}
        response = await self._request("GET", f"/v1/tools/{name}", params=params)
        return _parse(ToolDefinition, response)

    # -- service ---------------------------------------------------------------------

    async def healthy(self) -> bool:
        try:
            response = await self._http.get("/healthz")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def metrics(self) -> str:
        return (await self._request("GET", "/metrics")).text

    async def openapi(self) -> dict[str, Any]:
        document: dict[str, Any] = (await self._request("GET", "/openapi.json")).json()
        return document

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise StoreUnavailable(
                f"the Hands API at {self.base_url} did not answer: {error!r}"
            ) from None
        if response.is_success:
            return response
        raise error_of(response)


def error_of(response: httpx.Response) -> BrainhandsError:
    """The project's error for an error answer (by its code), however it is shaped."""
    try:
        info = _ERROR_BODY.validate_json(response.content).error
    except ValidationError:
        info = ErrorInfo(
            code=_CODE_BY_STATUS.get(response.status_code, BrainhandsError.code),
            message=f"the Hands API answered HTTP {response.status_code}: {response.text[:200]!r}",
        )
    if info.code == Unauthorized.code:
        return Unauthorized(info.message, **info.details)
    return BrainhandsError.from_info(info)


_CODE_BY_STATUS = {
    401: Unauthorized.code,
    404: NotFound.code,
    422: InvalidInput.code,
    503: StoreUnavailable.code,
}


def _parse(model: type[_M], response: httpx.Response) -> _M:
    try:
        return model.model_validate_json(response.content)
    except ValidationError as error:
        raise BrainhandsError(
            f"the Hands API at {response.url} answered what is not a {model.__name__}: "
            f"{error.errors()[0]['msg']}"
        ) from None
