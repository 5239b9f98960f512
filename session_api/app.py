"""The Session API as one ASGI app, built from what it serves (no globals).

``create_app(store=..., wakes=..., token=..., tokens=...)``; serve it with uvicorn
(``session_api.server.serve_api``). Every route but ``/healthz`` needs
``Authorization: Bearer <token>``, of a token whose scope allows it (``webapi.auth``),
or the web console's login cookie (``session_api.console``: reads anywhere, writes only
its own forms); the OpenAPI document is at ``/openapi.json``.
``stop_streams(app)`` ends the open event streams (a server calls it when it stops).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Final

from fastapi import APIRouter, FastAPI, Request, Response, Security
from fastapi.security import HTTPBearer
from pydantic import SecretStr

from contracts import InvalidInput
from contracts.errors import ErrorBody
from coordination import WakeQueue
from session_api.artifacts import artifacts_router
from session_api.console import COOKIE, Brains, console_router
from session_api.context import ApiContext
from session_api.inbox import inbox_router
from session_api.metrics import Backlog, SessionApiMetrics
from session_api.sessions import sessions_router
from session_api.stream import StreamSettings
from session_api.views import Health
from session_api.workspace import workspace_router
from session_store import SessionStore
from webapi import errors
from webapi.auth import Access, BearerAuth, Grant, grants_of
from webapi.limits import DEFAULT_MAX_BODY_BYTES, BodyLimit
from webapi.scopes import needs

log = logging.getLogger(__name__)

#: ``GET /v1/sessions`` lists at most this many sessions.
LIST_LIMIT: Final = 200

#: Documents the bearer scheme in the OpenAPI document; ``BearerAuth`` enforces it.
_BEARER = HTTPBearer(auto_error=False, description="The Session API token.")
_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    403: {"model": ErrorBody, "description": "The token's scope does not allow it"},
    422: {"model": ErrorBody, "description": "A field is missing or invalid"},
}


def create_app(
    *,
    store: SessionStore,
    wakes: WakeQueue | None,
    token: SecretStr | None = None,
    tokens: Sequence[Grant] = (),
    streams: StreamSettings | None = None,
    wake_timeout: timedelta = timedelta(seconds=5),
    list_limit: int = LIST_LIMIT,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    backlog: Backlog | None = None,
    brains: Brains | None = None,
    public_url: str | None = None,
) -> FastAPI:
    """The API over ``store`` (the truth), waking sessions through ``wakes`` after each
    accepted submission or cancel (None: nothing is woken; a scheduler's reconciler
    finds the work later). Request bodies over ``max_body_bytes`` are refused unread
    (413). ``backlog`` reads the wake queues for ``/metrics`` (``session_api.metrics``)
    and the console's fleet page, ``brains`` the Brains' beats for that page.
    ``public_url``: the origin browsers reach the API at when a proxy in front of it
    terminates TLS (the console's cookies are ``Secure`` by its scheme, its forms must
    come from it)."""
    grants = grants_of(token, tokens, "Session API")
    if store.read_only:
        raise InvalidInput("the Session API commits submissions: open the store writable")
    if wakes is None:
        log.warning(
            "no wake queue: this API wakes no Brain; accepted input waits until a "
            "scheduler's reconciler finds it in the store"
        )
    context = ApiContext(
        store=store,
        wakes=wakes,
        streams=streams or StreamSettings(),
        wake_timeout=wake_timeout,
        list_limit=list_limit,
    )
    app = FastAPI(
        title="brainhands Session API",
        version=_version(),
        description="Submit input to sessions (idempotent by request id), cancel it, "
        "and look at or follow a session's tasks, operations and entries, its workspace "
        "and its artifacts.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.context = context
    # The last added runs first: the token is checked before any body is read.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(BearerAuth, grants=grants, realm="brainhands-sessions", cookie=COOKIE)
    errors.install(app, service="the Session API")
    app.include_router(_health_router())
    app.include_router(
        sessions_router(context), dependencies=[Security(_BEARER)], responses=_UNAUTHORIZED
    )
    app.include_router(
        inbox_router(context), dependencies=[Security(_BEARER)], responses=_UNAUTHORIZED
    )
    for router in (workspace_router(context), artifacts_router(context)):
        app.include_router(router, dependencies=[Security(_BEARER)], responses=_UNAUTHORIZED)
    app.include_router(
        _metrics_router(SessionApiMetrics(backlog)),
        dependencies=[Security(_BEARER)],
        responses=_UNAUTHORIZED,
    )
    app.include_router(console_router(context, grants, backlog, brains, public_url))
    return app


def stop_streams(app: FastAPI) -> None:
    """End every open event stream now (clients reconnect with ``Last-Event-ID``)."""
    context: ApiContext = app.state.context
    context.stopping.set()


def _metrics_router(metrics: SessionApiMetrics) -> APIRouter:
    router = APIRouter(tags=["metrics"])

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    async def scrape(
        request: Request, _: Annotated[Grant, needs(Access.READ, deployment=True)]
    ) -> Response:
        """Prometheus metrics: the wake backlog per Brain route (``session_api.metrics``)."""
        await metrics.refresh()
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    return router


def _health_router() -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz")
    async def healthz() -> Health:
        """Liveness, without authentication; says nothing else."""
        return Health()

    return router


def _version() -> str:
    try:
        return version("brainhands")
    except PackageNotFoundError:
        return "0"
