"""Workspace versions built directly in a store, for tests that read workspaces without
running a Hands: the files and the version put through ``store.workspaces`` (as a Hands
records them), an operation whose result names the version (and publishes artifacts),
and the fenced commit that applies it and makes the version the session's head.

A tree is ``{path: bytes | File | Link | Dir}``; bytes are a file of mode 0644.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from contracts import Commit, Operation, OperationResult, OperationStatus
from contracts.workspace import (
    Artifact,
    EntryKind,
    Manifest,
    ManifestEntry,
    WorkspaceVersion,
)
from session_store import SessionStore


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Link:
    target: str


@dataclass(frozen=True)
class Dir:
    mode: int = 0o755


Tree = Mapping[str, bytes | File | Link | Dir]


async def put_version(
    store: SessionStore, tree: Tree, *, base: WorkspaceVersion | None = None
) -> WorkspaceVersion:
    """The version of ``tree`` (its blobs and manifest in the store), made from ``base``."""
    entries = []
    for path, node in sorted(tree.items()):
        entries.append(await _entry(store, path, node))
    return await store.workspaces.put_version(Manifest(entries=tuple(entries)), base=base)


async def apply_version(
    store: SessionStore,
    session_id: str,
    tree: Tree,
    *,
    operation_id: str,
    artifacts: Mapping[str, bytes] | None = None,
    fence: int = 1,
) -> tuple[WorkspaceVersion, int]:
    """Make ``tree`` the session's head as a write would: an operation (``edit``) whose
    result names the version made from the current head, applied by one commit. The
    version and that commit's seq."""
    base = (await store.session(session_id)).state.workspace
    version = await put_version(store, tree, base=base)
    await record_result(store, session_id, operation_id, version=version, artifacts=artifacts)
    seq = await _apply(store, session_id, operation_id, version, fence)
    return version, seq


async def record_result(
    store: SessionStore,
    session_id: str,
    operation_id: str,
    *,
    version: WorkspaceVersion | None = None,
    artifacts: Mapping[str, bytes] | None = None,
    tool: str = "edit",
) -> OperationResult:
    """An operation and its succeeded result, with ``version`` and ``artifacts``."""
    published = []
    for name, data in (artifacts or {}).items():
        media_type = "text/plain" if name.endswith((".txt", ".log")) else "application/octet-stream"
        blob = await store.put_blob(data, media_type)
        published.append(Artifact(name=name, blob=blob, media_type=media_type))
    record = await store.create_operation(
        Operation(operation_id=operation_id, session_id=session_id, tool=tool, args={})
    )
    record = await store.transition_operation(record, OperationStatus.RUNNING, attempts=1)
    await store.transition_operation(record, OperationStatus.SUCCEEDED)
    result = OperationResult(
        operation_id=operation_id,
        session_id=session_id,
        succeeded=True,
        output={"ok": True},
        version=version,
        artifacts=tuple(published),
    )
    return await store.put_operation_result(result)


async def _apply(
    store: SessionStore,
    session_id: str,
    operation_id: str,
    version: WorkspaceVersion,
    fence: int,
) -> int:
    handle = await store.session(session_id)
    commit = Commit(workspace=version, applied_operations=(operation_id,))
    return (await handle.commit(commit, fence=fence)).seq


async def _entry(store: SessionStore, path: str, node: bytes | File | Link | Dir) -> ManifestEntry:
    if isinstance(node, bytes):
        node = File(node)
    if isinstance(node, Link):
        return ManifestEntry(path=path, kind=EntryKind.LINK, mode=0, target=node.target)
    if isinstance(node, Dir):
        return ManifestEntry(path=path, kind=EntryKind.DIR, mode=node.mode)
    blob = await store.workspaces.put_file(node.data)
    assert blob.digest == hashlib.sha256(node.data).hexdigest()
    return ManifestEntry(
        path=path, kind=EntryKind.FILE, mode=node.mode, digest=blob.digest, size=len(node.data)
    )
