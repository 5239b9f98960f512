"""The Session API client's reads of workspaces and artifacts (``docs/workspaces.md``):
manifests, a path, a tarball, versions, diffs, artifacts. Bytes (a file, a tarball, an
artifact) are written to the caller's file as they arrive, never held whole; a path is
checked (``contracts.workspace.normal_path``) before it is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import BinaryIO
from urllib.parse import quote

import httpx

from bh.api_client import ApiClient, error_of
from contracts import InvalidInput, StoreUnavailable
from contracts.workspace import EntryKind, normal_path
from session_api.workspace_views import (
    ENTRY_HEADER,
    MODE_HEADER,
    SEQ_HEADER,
    VERSION_HEADER,
    ArtifactList,
    DiffView,
    PathView,
    VersionList,
    WorkspaceView,
)


class WorkspaceClient(ApiClient):
    """What ``SessionApiClient`` reads of a session's files."""

    async def workspace(self, session_id: str, *, at: int | None = None) -> WorkspaceView:
        """The workspace's head as of commit ``at`` (default: the latest) and its entries."""
        response = await self._request(
            "GET", f"/v1/sessions/{session_id}/workspace", params=_at(at)
        )
        return self._parse(WorkspaceView, response)

    async def workspace_path(
        self, session_id: str, path: str, *, into: BinaryIO, at: int | None = None
    ) -> PathView:
        """One path of the workspace: a file's bytes are written to ``into`` as they
        arrive; a directory's listing or a link's target come back in the view."""
        url = f"/v1/sessions/{session_id}/workspace/files/{quote(_path(path), safe='/')}"
        async with self._stream(url, _at(at)) as response:
            kind = EntryKind(response.headers.get(ENTRY_HEADER, EntryKind.FILE.value))
            if kind is not EntryKind.FILE:
                return self._parse(PathView, await _read(response))
            size = await _copy(response, into)
            return PathView(
                session_id=session_id,
                seq=int(response.headers[SEQ_HEADER]),
                version=response.headers[VERSION_HEADER],
                path=normal_path(path),
                kind=kind,
                mode=int(response.headers[MODE_HEADER], 8),
                size=size,
                digest=response.headers.get("etag", "").strip('"') or None,
            )

    async def workspace_tar(
        self, session_id: str, *, into: BinaryIO, at: int | None = None
    ) -> PathView:
        """The workspace as a tarball, written to ``into`` as it arrives; what it is of
        (its ``size`` is the tarball's)."""
        async with self._stream(f"/v1/sessions/{session_id}/workspace.tar", _at(at)) as response:
            size = await _copy(response, into)
            return PathView(
                session_id=session_id,
                seq=int(response.headers[SEQ_HEADER]),
                version=response.headers[VERSION_HEADER],
                path=".",
                kind=EntryKind.DIR,
                size=size,
            )

    async def workspace_versions(self, session_id: str) -> VersionList:
        response = await self._request("GET", f"/v1/sessions/{session_id}/workspace/versions")
        return self._parse(VersionList, response)

    async def workspace_diff(
        self, session_id: str, *, since: int, to: int | None = None
    ) -> DiffView:
        """What changed from the workspace after commit ``since`` to the one after
        ``to`` (default: the latest)."""
        params = {"from": str(since), **_at(to, "to")}
        response = await self._request(
            "GET", f"/v1/sessions/{session_id}/workspace/diff", params=params
        )
        return self._parse(DiffView, response)

    async def artifacts(self, session_id: str) -> ArtifactList:
        response = await self._request("GET", f"/v1/sessions/{session_id}/artifacts")
        return self._parse(ArtifactList, response)

    async def artifact(
        self, session_id: str, operation_id: str, name: str, *, into: BinaryIO
    ) -> int:
        """Write an artifact's bytes to ``into`` as they arrive; how many."""
        url = f"/v1/sessions/{session_id}/artifacts/{operation_id}/{quote(name, safe='')}"
        async with self._stream(url, {}) as response:
            return await _copy(response, into)

    @asynccontextmanager
    async def _stream(self, url: str, params: dict[str, str]) -> AsyncIterator[httpx.Response]:
        """A successful answer, read as it arrives; an error answer raised as the
        project's error, a dropped connection (even mid-body) as ``StoreUnavailable``."""
        try:
            async with self._http.stream("GET", url, params=params) as response:
                if not response.is_success:
                    await response.aread()
                    raise error_of(response, self.what)
                yield response
        except httpx.HTTPError as error:
            raise StoreUnavailable(
                f"the {self.what} at {self.base_url} broke off {url}: {error!r}"
            ) from None


def _at(at: int | None, name: str = "at") -> dict[str, str]:
    return {} if at is None else {name: str(at)}


def _path(path: str) -> str:
    """A workspace path, checked before it is sent (an HTTP client would otherwise
    resolve ``..`` itself and ask for another path)."""
    try:
        return normal_path(path)
    except ValueError as error:
        raise InvalidInput(str(error), field="path") from None


async def _copy(response: httpx.Response, into: BinaryIO) -> int:
    written = 0
    async for chunk in response.aiter_bytes():
        into.write(chunk)
        written += len(chunk)
    return written


async def _read(response: httpx.Response) -> httpx.Response:
    await response.aread()
    return response
