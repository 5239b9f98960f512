"""``/v1/sessions/{id}/workspace…``: read a session's workspace as of any commit — its
manifest, one path, the whole tree as a tarball, the versions it applied, and what
changed between two commits (``docs/workspaces.md``, "Reading a workspace").

Every route reads; each checks the token's scope for the session like the session's
other routes, and every path through ``contracts.workspace.normal_path``: a path only
ever selects an entry of a manifest, never anything of the server's filesystem. Bytes
of a session (a file, a tarball, an artifact) are sent as attachments a browser will
not run (``SESSION_BYTES``): the console's login cookie authenticates reads here too.
"""

from __future__ import annotations

import mimetypes
from typing import Annotated, Any, Final
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse

from contracts import Identifier, NotFound
from contracts.errors import ErrorBody
from contracts.workspace import EntryKind, ManifestEntry
from session_api.context import ApiContext
from session_api.workspace_diff import diff
from session_api.workspace_tar import tar_stream
from session_api.workspace_tree import (
    Tree,
    applied_versions,
    empty_head,
    head_at,
    manifest_of,
    tree_at,
    workspace_path,
)
from session_api.workspace_views import (
    ENTRY_HEADER,
    MODE_HEADER,
    SEQ_HEADER,
    VERSION_HEADER,
    DiffView,
    PathView,
    VersionList,
    VersionView,
    WorkspaceView,
)
from webapi.auth import Access, Grant
from webapi.scopes import check_session, needs

SessionId = Annotated[Identifier, Path(description="The session's id.")]


async def _session_reader(
    session_id: SessionId, grant: Annotated[Grant, needs(Access.READ)]
) -> Grant:
    check_session(grant, session_id)
    return grant


#: a token that reads the session named in the path: checked before anything else of
#: the request (a query parameter too), so another tenant's token learns only the 403
Reader = Annotated[Grant, Depends(_session_reader)]
AtParam = Annotated[
    int | None,
    Query(ge=1, description="The workspace as it was right after this commit (default: now)."),
]
#: what every answer of a session's bytes carries: a browser saves it, never runs it
SESSION_BYTES: Final = {
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "private, no-cache",
}
_TYPES: Final = mimetypes.MimeTypes()  # Python's own table: the same answer on every host

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorBody,
        "description": "No such session, no workspace as of that commit, a commit past "
        "the head, or no such path",
    },
    503: {"model": ErrorBody, "description": "The store is not reachable: retry"},
}
_BINARY: Final = {"schema": {"type": "string", "format": "binary"}}


def attachment(name: str) -> dict[str, str]:
    """Headers of a download named ``name`` (its last path part)."""
    filename = quote(name.rsplit("/", 1)[-1], safe="")
    return {**SESSION_BYTES, "Content-Disposition": f"attachment; filename*=UTF-8''{filename}"}


def media_type_of(path: str) -> str:
    """A file's content type by its name; ``application/octet-stream`` when unknown."""
    return _TYPES.guess_type(path, strict=True)[0] or "application/octet-stream"


def workspace_router(context: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1/sessions", tags=["workspace"])
    store = context.store

    @router.get("/{session_id}/workspace", responses=_ERRORS)
    async def workspace(session_id: SessionId, _: Reader, at: AtParam = None) -> WorkspaceView:
        """The session's workspace head as of commit ``at`` (default: the latest): its
        version (id, base, files, size) and its manifest's entries in path order; 404
        when the session has no workspace yet then, or ``at`` is past its head."""
        tree = await tree_at(store, session_id, at)
        return WorkspaceView(
            session_id=session_id,
            seq=tree.head.seq,
            version=VersionView.of(tree.version),
            entries=list(tree.manifest.entries),
        )

    @router.get(
        "/{session_id}/workspace/files/{path:path}",
        response_class=Response,
        responses={
            200: {
                "content": {"application/octet-stream": _BINARY, "application/json": {}},
                "model": PathView,
                "description": "A file's bytes (`X-Workspace-Entry: file`, its mode in "
                "`X-Workspace-Mode`, its digest as the `ETag`, the version and commit in "
                "`X-Workspace-Version` and `X-Workspace-Seq`); a directory's listing or a "
                "link's target as JSON (`X-Workspace-Entry: dir` / `link`)",
            },
            **_ERRORS,
        },
    )
    async def workspace_file(
        session_id: SessionId,
        path: Annotated[str, Path(description="A workspace path (relative, POSIX).")],
        _: Reader,
        at: AtParam = None,
    ) -> Response:
        """One path of the workspace as of commit ``at``: a file's bytes (content type
        by its name, else ``application/octet-stream``), a directory's listing, or a
        link's target (never followed); 404 when the version has no such path."""
        wanted = workspace_path(path)
        tree = await tree_at(store, session_id, at)
        entry = tree.find(wanted)
        if entry is None:
            raise _no_path(tree, wanted)
        if entry.kind is EntryKind.FILE:
            return await _file(context, tree, entry)
        view = PathView(
            session_id=session_id,
            seq=tree.head.seq,
            version=tree.version.id,
            path=entry.path,
            kind=entry.kind,
            mode=None if entry.kind is EntryKind.LINK else entry.mode,
            target=entry.target,
            entries=tree.children(entry.path) if entry.kind is EntryKind.DIR else [],
        )
        headers = {ENTRY_HEADER: entry.kind.value}
        return JSONResponse(view.model_dump(mode="json"), headers=headers)

    @router.get(
        "/{session_id}/workspace.tar",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-tar": _BINARY}}, **_ERRORS},
    )
    async def workspace_tar(
        session_id: SessionId, _: Reader, at: AtParam = None
    ) -> StreamingResponse:
        """The workspace as of commit ``at`` as a tar stream (pax format; links as links,
        modes kept, every member dated at that commit), sent as it is read."""
        tree = await tree_at(store, session_id, at)
        when = tree.head.committed_at
        chunks = tar_stream(
            store.workspaces.file, tree.manifest, mtime=when.timestamp() if when else 0.0
        )
        headers = attachment(f"{session_id}-{tree.head.seq}.tar") | _which(tree)
        return StreamingResponse(chunks, media_type="application/x-tar", headers=headers)

    @router.get("/{session_id}/workspace/versions", responses=_ERRORS)
    async def workspace_versions(session_id: SessionId, _: Reader) -> VersionList:
        """Every version the session applied, oldest first: the commit that made it the
        head, the operation whose result produced it, its size."""
        return VersionList(
            session_id=session_id, versions=await applied_versions(store, session_id)
        )

    @router.get("/{session_id}/workspace/diff", responses=_ERRORS)
    async def workspace_diff(
        session_id: SessionId,
        _: Reader,
        since: Annotated[
            int,
            Query(
                alias="from",
                ge=0,
                description="From the workspace after this commit (0: the empty one, before "
                "the first commit).",
            ),
        ],
        to: AtParam = None,
    ) -> DiffView:
        """What changed from the workspace after commit ``from`` to the one after commit
        ``to`` (default: the latest): added, removed and changed paths, with a unified
        diff for text files of bounded size. No workspace yet is the empty one."""
        after = await head_at(store, session_id, to)
        before = await head_at(store, session_id, since) if since else empty_head(after)
        changes = await diff(
            store.workspaces.file,
            await manifest_of(store, before.version),
            await manifest_of(store, after.version),
        )
        return DiffView(
            session_id=session_id,
            from_seq=before.seq,
            to_seq=after.seq,
            from_version=None if before.version is None else before.version.id,
            to_version=None if after.version is None else after.version.id,
            changes=changes,
        )

    return router


async def _file(context: ApiContext, tree: Tree, entry: ManifestEntry) -> Response:
    data = await context.store.workspaces.file(entry)
    headers = {
        **attachment(entry.path),
        ENTRY_HEADER: EntryKind.FILE.value,
        MODE_HEADER: f"{entry.mode:04o}",
        "ETag": f'"{entry.digest}"',
        **_which(tree),
    }
    return Response(data, media_type=media_type_of(entry.path), headers=headers)


def _which(tree: Tree) -> dict[str, str]:
    """Headers naming the version a file or tarball is of, and the commit it was read at."""
    return {VERSION_HEADER: tree.version.id, SEQ_HEADER: str(tree.head.seq)}


def _no_path(tree: Tree, path: str) -> NotFound:
    return NotFound(
        f"{path!r} is not in the workspace of session {tree.head.session_id!r} as of "
        f"commit {tree.head.seq} (version {tree.version.id[:12]})",
        path=path,
        seq=tree.head.seq,
    )
