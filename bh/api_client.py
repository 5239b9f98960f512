"""What the CLI's HTTP clients share: a bearer-token httpx client whose error answers
become the project's errors again (by their stable ``code``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

import httpx
import typer
from pydantic import BaseModel, SecretStr, TypeAdapter, ValidationError

from bh import terminal
from contracts import BrainhandsError, ErrorInfo, InvalidInput, NotFound, StoreUnavailable
from contracts.errors import ErrorBody, Unauthorized

_M = TypeVar("_M", bound=BaseModel)
_ERROR_BODY: TypeAdapter[ErrorBody] = TypeAdapter(ErrorBody)
_CODE_BY_STATUS = {
    401: Unauthorized.code,
    404: NotFound.code,
    422: InvalidInput.code,
    503: StoreUnavailable.code,
}


class ApiClient:
    """Subclasses name their API (``what``) and its environment variables."""

    what: ClassVar[str] = "API"
    url_variable: ClassVar[str] = ""
    token_variable: ClassVar[str] = ""

    def __init__(
        self,
        base_url: str,
        token: str | SecretStr,
        *,
        timeout: float | httpx.Timeout = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        if not base_url:
            raise InvalidInput(
                f"the {self.what} URL is empty: set {self.url_variable} or --api-url"
            )
        if not secret:
            raise InvalidInput(
                f"the {self.what} needs a token: set {self.token_variable} or --token"
            )
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {secret}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
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

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise StoreUnavailable(
                f"the {self.what} at {self.base_url} did not answer: {error!r}"
            ) from None
        if response.is_success:
            return response
        raise error_of(response, self.what)

    async def healthy(self) -> bool:
        """Whether ``/healthz`` answers 200 (open without a token)."""
        try:
            response = await self._http.get("/healthz")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def openapi(self) -> dict[str, Any]:
        document: dict[str, Any] = (await self._request("GET", "/openapi.json")).json()
        return document

    def _parse(self, model: type[_M], response: httpx.Response) -> _M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as error:
            raise BrainhandsError(
                f"the {self.what} at {response.url} answered what is not a {model.__name__}: "
                f"{error.errors()[0]['msg']}"
            ) from None


def error_of(response: httpx.Response, what: str = "API") -> BrainhandsError:
    """The project's error for an error answer (by its code), however it is shaped."""
    try:
        info = _ERROR_BODY.validate_json(response.content).error
    except ValidationError:
        info = ErrorInfo(
            code=_CODE_BY_STATUS.get(response.status_code, BrainhandsError.code),
            message=f"the {what} answered HTTP {response.status_code}: {response.text[:200]!r}",
        )
    return BrainhandsError.from_info(info)


_C = TypeVar("_C", bound=ApiClient)
_T = TypeVar("_T")
_out = terminal.console()
_errors = terminal.console(stderr=True)


def print_json(model: BaseModel) -> None:
    _out.print_json(model.model_dump_json())


def run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run a CLI command's coroutine; project errors become ``code: message``, exit 2."""
    try:
        return asyncio.run(coroutine)
    except BrainhandsError as error:
        _errors.print(f"[red]{error.code}[/]: {error.message}", highlight=False)
        raise typer.Exit(2) from None


def run_client(
    client: type[_C],
    api_url: str | None,
    token: str | None,
    call: Callable[[_C], Awaitable[_T]],
) -> _T:
    """Run one call against an API with a client made for it."""

    async def body() -> _T:
        async with client(api_url or "", token or "") as api:
            return await call(api)

    return run(body())
