"""The console's Workspace tab (``/console/sessions/{id}/workspace``): a version's file
tree (the version chosen among those the session applied), one path of it (a text file
shown escaped, a binary or large one offered for download, a directory's listing, a
link's target, never followed), and a diff between two versions.

It reads through the same functions as the API's workspace routes
(``session_api.workspace_tree``, ``session_api.workspace_diff``), behind the caller's
grant for the session; downloads are the API's own routes, which the login cookie reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from contracts import Identifier, NotFound
from contracts.workspace import EntryKind, Manifest, ManifestEntry
from session_api.context import ApiContext
from session_api.workspace_diff import diff, text_of
from session_api.workspace_tree import (
    Head,
    Tree,
    applied_versions,
    head_at,
    manifest_of,
    workspace_path,
)
from session_api.workspace_views import AppliedVersion, PathChange
from webapi.auth import Grant
from webapi.scopes import check_session

#: a file larger than this is offered for download, not shown on the page
VIEW_BYTES: Final = 256 * 1024
#: rows of a version's tree drawn on one page (a bigger tree says how many are left out)
TREE_ROWS: Final = 2_000
#: the deepest indentation drawn (deeper paths are drawn at this depth)
DEEPEST: Final = 15

#: renders a console page: ``(template, request, grant, **values)`` (``pages._page``)
Render = Callable[..., HTMLResponse]
#: the grant of a request that may read, or the error (``pages._reader``)
ReadGrant = Callable[[Request], Grant]
AtQuery = Annotated[int | None, Query(ge=1)]


@dataclass(frozen=True)
class TreeRow:
    """One path of a drawn tree: its last part at its depth, and the page that shows it."""

    entry: ManifestEntry
    name: str
    depth: int
    href: str


@dataclass(frozen=True)
class Shown:
    """The selected path: a text file's ``text``, or why it is not shown (``withheld``)
    and where to download it; a directory's ``children``."""

    entry: ManifestEntry
    download: str | None = None
    text: str | None = None
    withheld: str | None = None
    children: tuple[TreeRow, ...] = ()


@dataclass(frozen=True)
class DiffLine:
    kind: str  # add, del, hunk, meta or "" (context): the line's CSS class
    text: str


def workspace_url(session_id: str, seq: int, path: str | None = None) -> str:
    """The console page of the workspace as of commit ``seq`` (with ``path`` selected)."""
    url = f"/console/sessions/{quote(session_id, safe='')}/workspace?at={seq}"
    return url if path is None else f"{url}&path={quote(path, safe='/')}"


def download_url(session_id: str, seq: int, path: str) -> str:
    """The API's route of a file's bytes as of commit ``seq``."""
    where = f"/v1/sessions/{quote(session_id, safe='')}/workspace/files/{quote(path, safe='/')}"
    return f"{where}?at={seq}"


def tree_rows(session_id: str, seq: int, entries: tuple[ManifestEntry, ...]) -> list[TreeRow]:
    """The entries drawn as a tree: each under its directory (one the manifest only
    implies is drawn too), a directory's paths right after it."""
    rows: list[TreeRow] = []
    drawn: set[str] = set()
    for entry in sorted(entries, key=lambda entry: entry.path.split("/")):
        parts = entry.path.split("/")
        for depth in range(1, len(parts)):  # implied parents first
            parent = "/".join(parts[:depth])
            if parent not in drawn:
                implied = ManifestEntry(path=parent, kind=EntryKind.DIR, mode=0o755)
                rows.append(_row(session_id, seq, implied))
                drawn.add(parent)
        if entry.path not in drawn:
            rows.append(_row(session_id, seq, entry))
            drawn.add(entry.path)
    return rows


def _row(session_id: str, seq: int, entry: ManifestEntry) -> TreeRow:
    depth = entry.path.count("/")
    name = entry.path.rsplit("/", 1)[-1]
    return TreeRow(entry, name, min(depth, DEEPEST), workspace_url(session_id, seq, entry.path))


def diff_lines(change: PathChange) -> list[DiffLine]:
    """A change's unified diff, a line each with the class it is drawn with."""
    kinds = (("+++", "meta"), ("---", "meta"), ("@@", "hunk"), ("+", "add"), ("-", "del"))
    return [
        DiffLine(next((kind for prefix, kind in kinds if line.startswith(prefix)), ""), line)
        for line in (change.diff or "").splitlines()
    ]


def workspace_pages(context: ApiContext, render: Render, reader: ReadGrant) -> APIRouter:
    """The Workspace tab's pages, under the console's prefix."""
    router = APIRouter(include_in_schema=False)
    store = context.store

    async def versions_of(request: Request, session_id: str) -> tuple[Grant, list[AppliedVersion]]:
        grant = reader(request)
        check_session(grant, session_id)
        return grant, await applied_versions(store, session_id)  # NotFound without commits

    @router.get("/sessions/{session_id}/workspace")
    async def workspace(
        request: Request,
        session_id: Identifier,
        at: AtQuery = None,
        path: Annotated[str | None, Query(max_length=4096)] = None,
    ) -> HTMLResponse:
        grant, versions = await versions_of(request, session_id)
        wanted = None if path is None else workspace_path(path)
        head = await head_at(store, session_id, at)
        values: dict[str, Any] = {
            "session_id": session_id,
            "tab": "workspace",
            "versions": versions,
            "head": head,
            "chosen": _chosen(versions, head),
            "rows": [],
            "left_out": 0,
            "shown": None,
        }
        if head.version is not None:
            tree = Tree(head, head.version, await store.workspaces.manifest(head.version))
            rows = tree_rows(session_id, head.seq, tree.manifest.entries)
            values["rows"], values["left_out"] = rows[:TREE_ROWS], max(0, len(rows) - TREE_ROWS)
            if wanted is not None:
                values["shown"] = await _shown(context, tree, wanted)
        elif wanted is not None:
            raise NotFound(f"session {session_id!r} has no workspace as of commit {head.seq}")
        return render("workspace.html", request, grant, **values)

    @router.get("/sessions/{session_id}/workspace/diff")
    async def workspace_diff(
        request: Request,
        session_id: Identifier,
        since: Annotated[int | None, Query(alias="from", ge=1)] = None,
        to: AtQuery = None,
    ) -> HTMLResponse:
        grant, versions = await versions_of(request, session_id)
        values: dict[str, Any] = {
            "session_id": session_id,
            "tab": "workspace",
            "versions": versions,
            "changes": [],
            "before": None,
            "after": None,
        }
        if versions:
            after = await head_at(store, session_id, to)
            before = await head_at(store, session_id, since or _previous(versions, after))
            changes = await diff(
                store.workspaces.file,
                await _manifest(context, before),
                await _manifest(context, after),
            )
            values |= {
                "before": before,
                "after": after,
                "chosen_from": _chosen(versions, before),
                "chosen_to": _chosen(versions, after),
                "changes": [(change, diff_lines(change)) for change in changes],
            }
        return render("workspace_diff.html", request, grant, **values)

    return router


def _chosen(versions: list[AppliedVersion], head: Head) -> int | None:
    """The commit (of ``versions``) that made ``head``'s version the head."""
    made = [applied.seq for applied in versions if applied.seq <= head.seq]
    return made[-1] if made and head.version is not None else None


def _previous(versions: list[AppliedVersion], after: Head) -> int:
    """The commit to diff from by default: the one that applied the version before
    ``after``'s (or ``after``'s own commit when it is the first)."""
    made = [applied.seq for applied in versions if applied.seq <= after.seq]
    return made[-2] if len(made) > 1 else made[-1] if made else after.seq


async def _manifest(context: ApiContext, head: Head) -> Manifest:
    return await manifest_of(context.store, head.version)


async def _shown(context: ApiContext, tree: Tree, path: str) -> Shown:
    entry = tree.find(path)
    if entry is None:
        raise NotFound(
            f"{path!r} is not in the workspace of session {tree.head.session_id!r} as of "
            f"commit {tree.head.seq}",
            path=path,
        )
    session_id, seq = tree.head.session_id, tree.head.seq
    if entry.kind is EntryKind.DIR:
        below = tuple(_row(session_id, seq, child) for child in tree.children(entry.path))
        return Shown(entry, children=below)
    if entry.kind is EntryKind.LINK:
        return Shown(entry)
    download = download_url(session_id, seq, entry.path)
    if entry.size > VIEW_BYTES:
        return Shown(entry, download, withheld=f"larger than {VIEW_BYTES // 1024} KiB")
    text = text_of(await context.store.workspaces.file(entry))
    if text is None:
        return Shown(entry, download, withheld="binary (not UTF-8 text)")
    return Shown(entry, download, text=text)
