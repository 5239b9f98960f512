"""What the CLI's HTTP clients share: a bearer-token httpx client whose error answers
become the project's errors again (by their stable ``code``)."""

from __future__ import annotations

from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

import httpx
from pydantic import BaseModel, SecretStr, TypeAdapter, ValidationError

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
