"""A session's workspace as of a commit: its head version, that version's manifest, one
path of it, and the versions the session applied — read from the store, the same for
the API's routes and the console's pages.

The head as of commit SEQ is ``SessionState.workspace`` of the state right after SEQ
(``store.session_at``); the latest is the session's current state. The versions are
read from the commit log: every commit that moved the head (``Commit.workspace``), with
the operation whose applied result produced it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime

from contracts import InvalidInput, NotFound
from contracts.workspace import AppliedVersion as IndexedVersion
from contracts.workspace import EntryKind, Manifest, ManifestEntry, WorkspaceVersion, normal_path
from session_api.workspace_views import AppliedVersion, VersionView
from session_store import SessionStore


@dataclass(frozen=True)
class Head:
    """The session's workspace head right after commit ``seq`` (None: empty)."""

    session_id: str
    seq: int
    committed_at: datetime | None
    version: WorkspaceVersion | None


@dataclass(frozen=True)
class Tree:
    """A head that has a version, with its manifest."""

    head: Head
    version: WorkspaceVersion
    manifest: Manifest

    def find(self, path: str) -> ManifestEntry | None:
        """The entry of ``path``; a directory the manifest only implies (a parent of
        some entry) is a directory entry too."""
        for entry in self.manifest.entries:
            if entry.path == path:
                return entry
        if self.children(path):
            return ManifestEntry(path=path, kind=EntryKind.DIR, mode=0o755)
        return None

    def children(self, path: str | None) -> list[ManifestEntry]:
        """The entries right below ``path`` (None: the root), in path order."""
        return [entry for entry in self.manifest.entries if _parent(entry.path) == path]


async def head_at(store: SessionStore, session_id: str, at: int | None) -> Head:
    """The head right after commit ``at`` (default: the latest); ``NotFound`` for a
    session without commits or past its head."""
    if at is None:
        handle = await store.session(session_id)
        if handle.seq == 0:
            raise NotFound(f"session {session_id!r} has no commits", session_id=session_id)
    else:
        handle = await store.session_at(session_id, at)
    state = handle.state
    return Head(session_id, state.seq, state.updated_at, state.workspace)


def empty_head(later: Head) -> Head:
    """The workspace before the session's first commit: empty."""
    return Head(later.session_id, 0, None, None)


async def tree_at(store: SessionStore, session_id: str, at: int | None) -> Tree:
    """The tree of the head right after commit ``at``; ``NotFound`` when the session has
    no workspace (yet) then."""
    head = await head_at(store, session_id, at)
    if head.version is None:
        raise NotFound(
            f"session {session_id!r} has no workspace as of commit {head.seq}: no write "
            "to its workspace was applied by then",
            session_id=session_id,
            seq=head.seq,
        )
    return Tree(head, head.version, await store.workspaces.manifest(head.version))


async def manifest_of(store: SessionStore, version: WorkspaceVersion | None) -> Manifest:
    """A version's manifest; None's is the empty workspace's."""
    return Manifest() if version is None else await store.workspaces.manifest(version)


def workspace_path(path: str) -> str:
    """``path`` as a workspace path, or ``InvalidInput`` naming the field and the rule
    (a path is never a filesystem path here: it only ever selects a manifest entry)."""
    try:
        return normal_path(path)
    except ValueError as error:
        raise InvalidInput(str(error), field="path", location="path") from None


async def applied_versions(store: SessionStore, session_id: str) -> list[AppliedVersion]:
    """Every version the session applied, oldest first, from the store's versions index
    (``store.workspace_versions``); a fork's list starts with the head it was forked
    with, at its first commit. ``NotFound`` without commits."""
    first = await store.commits(session_id, limit=1)
    if not first:
        raise NotFound(f"session {session_id!r} has no commits", session_id=session_id)
    found: list[AppliedVersion] = []
    fork = first[0].commit.fork
    if fork is not None:
        forked = (await store.session_at(session_id, first[0].seq)).state.workspace
        if forked is not None:
            found.append(
                AppliedVersion(
                    seq=first[0].seq,
                    committed_at=first[0].committed_at,
                    version=VersionView.of(forked),
                    inherited_from=f"{fork.session_id}@{fork.seq}",
                )
            )
    for entry in await store.workspace_versions(session_id):
        if entry.session_id != session_id:
            continue  # the origin's, up to the fork point: the fork's head stands for them
        found.append(
            AppliedVersion(
                seq=entry.seq,
                operation_id=await _producer(store, entry),
                committed_at=entry.committed_at,
                version=VersionView.of(entry.version),
            )
        )
    return found


async def _producer(store: SessionStore, entry: IndexedVersion) -> str | None:
    """The operation whose applied result produced the version: the one its commit
    applied, or of several, the one whose result names that version."""
    if len(entry.operations) == 1:
        return entry.operations[0]
    for operation_id in entry.operations:
        result = await store.get_operation_result(operation_id)
        version = None if result is None else result.version
        if version is not None and version.id == entry.version.id:
            return operation_id
    return None


def _parent(path: str) -> str | None:
    parent = posixpath.dirname(path)
    return parent or None
