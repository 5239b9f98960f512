"""``/v1/sessions/{id}/artifacts…``: the named, immutable outputs the session's
operations published (a report, a patch, a build log), listed and downloaded.

An artifact is a blob its operation's result references (``OperationResult.artifacts``);
the list reads the session's operation records and their results, the download one
result and one blob. The token's scope is checked for the session, and the operation
must be the session's: another session's operation is the 404 of a missing one.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Final

from fastapi import APIRouter, Path
from fastapi.responses import Response

from contracts import Identifier, NotFound, Operation, OperationResult
from contracts.errors import ErrorBody
from contracts.workspace import Artifact
from session_api.context import ApiContext
from session_api.workspace import Reader, attachment
from session_api.workspace_views import NAME_PATTERN, ArtifactList, ArtifactView
from session_store import SessionStore

SessionId = Annotated[Identifier, Path(description="The session's id.")]
OperationId = Annotated[Identifier, Path(description="The operation that published it.")]
ArtifactName = Annotated[str, Path(description="The artifact's name.", pattern=NAME_PATTERN)]
#: operation results read at once
_READS: Final = 16
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such session, operation or artifact"},
    503: {"model": ErrorBody, "description": "The store is not reachable: retry"},
}


def artifacts_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/sessions", tags=["artifacts"])
    store = context.store

    @router.get("/{session_id}/artifacts", responses=_ERRORS)
    async def list_artifacts(session_id: SessionId, _: Reader) -> ArtifactList:
        """The artifacts of the session's operations (operation, name, size, media
        type), oldest operation first."""
        return ArtifactList(
            session_id=session_id, artifacts=await session_artifacts(store, session_id)
        )

    @router.get(
        "/{session_id}/artifacts/{operation_id}/{name}",
        response_class=Response,
        responses={
            200: {
                "content": {"application/octet-stream": {"schema": {"type": "string"}}},
                "description": "The artifact's bytes, with its media type",
            },
            **_ERRORS,
        },
    )
    async def get_artifact(
        session_id: SessionId, operation_id: OperationId, name: ArtifactName, _: Reader
    ) -> Response:
        """One artifact's bytes (its media type; sent as an attachment)."""
        artifact = await find_artifact(store, session_id, operation_id, name)
        data = await store.get_blob(artifact.blob)
        return Response(data, media_type=artifact.media_type, headers=attachment(name))

    return router


async def session_artifacts(store: SessionStore, session_id: str) -> list[ArtifactView]:
    """Every artifact of the session's operations, oldest operation first."""
    operations = sorted(
        await store.list_operations(session_id), key=lambda op: (op.created_at, op.operation_id)
    )
    reads = asyncio.Semaphore(_READS)

    async def result_of(operation: Operation) -> OperationResult | None:
        async with reads:
            return await store.get_operation_result(operation.operation_id)

    results = await asyncio.gather(*(result_of(operation) for operation in operations))
    return [
        artifact_view(operation, result, artifact)
        for operation, result in zip(operations, results, strict=True)
        if result is not None
        for artifact in result.artifacts
    ]


def artifact_view(
    operation: Operation, result: OperationResult, artifact: Artifact
) -> ArtifactView:
    return ArtifactView(
        operation_id=operation.operation_id,
        tool=operation.tool,
        name=artifact.name,
        size=artifact.blob.size,
        media_type=artifact.media_type,
        digest=artifact.blob.digest,
        finished_at=result.finished_at,
    )


async def find_artifact(
    store: SessionStore, session_id: str, operation_id: str, name: str
) -> Artifact:
    """The artifact ``name`` of the session's operation; ``NotFound`` otherwise (an
    operation of another session is one this session does not have)."""
    operation = await store.get_operation(operation_id)
    if operation is None or operation.session_id != session_id:
        raise NotFound(
            f"session {session_id!r} has no operation {operation_id!r}",
            operation_id=operation_id,
        )
    result = await store.get_operation_result(operation_id)
    for artifact in () if result is None else result.artifacts:
        if artifact.name == name:
            return artifact
    raise NotFound(
        f"operation {operation_id!r} published no artifact {name!r}",
        operation_id=operation_id,
        name=name,
    )
