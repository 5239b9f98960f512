"""The Hands API as one ASGI app, built from what it serves (no globals).

``create_app(store=..., executor=..., sandbox=..., bus=..., token=..., tokens=...)``;
serve it with uvicorn (``hands.api_server.serve_api``). Every route but ``/healthz``
needs ``Authorization: Bearer <token>``, of a token whose scope allows it
(``webapi.auth``); the OpenAPI document is at ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request, Response, Security
from fastapi.security import HTTPBearer
from pydantic import SecretStr

from bus import Bus
from contracts.errors import ErrorBody
from hands.api.context import ApiContext
from hands.api.operations import operations_router
from hands.api.tools import tools_router
from hands.api.views import Health
from hands.executor import Busy, Executor
from hands.labels import ToolCaps
from hands.metrics import HandsMetrics
from hands.sandbox import Sandbox
from session_store import SessionStore
from webapi import errors
from webapi.auth import Access, BearerAuth, Grant, grants_of
from webapi.exposition import render
from webapi.limits import DEFAULT_MAX_BODY_BYTES, BodyLimit
from webapi.scopes import needs

#: Documents the bearer scheme in the OpenAPI document; ``BearerAuth`` enforces it.
_BEARER = HTTPBearer(auto_error=False, description="The Hands API token.")
_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    403: {"model": ErrorBody, "description": "The token's scope does not allow it"},
    422: {"model": ErrorBody, "description": "A field is missing or invalid"},
}


def create_app(
    *,
    store: SessionStore,
    executor: Executor,
    sandbox: Sandbox,
    bus: Bus | None,
    token: SecretStr | None = None,
    tokens: Sequence[Grant] = (),
    metrics: HandsMetrics | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    caps: ToolCaps | None = None,
) -> FastAPI:
    """The API over ``store`` (the truth), acting through ``executor`` and ``sandbox``
    (this host's), broadcasting cancellations on ``bus`` when there is one. Request bodies over
    ``max_body_bytes`` are refused unread (413)."""
    grants = grants_of(token, tokens, "Hands API")
    context = ApiContext(
        store=store,
        executor=executor,
        sandbox=sandbox,
        bus=bus,
        metrics=metrics or HandsMetrics(),
        caps=caps or ToolCaps(),
    )
    app = FastAPI(
        title="brainhands Hands API",
        version=_version(),
        description="Operations (status, result, logs; cancel, verify), the tool "
        "registry, health and metrics of a Hands deployment.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    # The last added runs first: the token is checked before any body is read.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(BearerAuth, grants=grants, realm="brainhands-hands")
    errors.install(app, service="the Hands API", statuses=((Busy, 409),))
    app.include_router(_health_router())
    for router in (operations_router(context), tools_router(context), _metrics_router(context)):
        app.include_router(router, dependencies=[Security(_BEARER)], responses=_UNAUTHORIZED)
    return app


def _health_router() -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz")
    async def healthz() -> Health:
        """Liveness, without authentication; says nothing else."""
        return Health()

    return router


def _metrics_router(context: ApiContext) -> APIRouter:
    router = APIRouter(tags=["metrics"])

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    async def metrics(
        request: Request, _: Annotated[Grant, needs(Access.READ, deployment=True)]
    ) -> Response:
        """Prometheus metrics of this process (see ``hands.metrics``)."""
        await context.metrics.refresh(sandbox=context.sandbox, bus=context.bus)
        body, content_type = render(context.metrics.registry, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    return router


def _version() -> str:
    try:
        return version("brainhands")
    except PackageNotFoundError:
        return "0"
