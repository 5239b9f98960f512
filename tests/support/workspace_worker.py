"""A process that writes a workspace version or collects a session's, and can be made to
SIGKILL itself at its n-th store write (``BH_CRASH_AT``: ``runtime.crashpoints``), for
``tests/chaos/test_store_workspace_collection_crash.py``.

``python -m tests.support.workspace_worker collect URL SESSION`` collects the session;
``… write URL SESSION`` uploads what the store lacks of ``WRITTEN``, records
it as a version from the session's head and commits it, printing the version's id.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from contracts import Commit, ConflictError, InvalidInput
from contracts.workspace import EntryKind, Manifest, ManifestEntry, WorkspaceVersion
from runtime.crashpoints import CrashPoints
from session_store import SessionStore, open_store

#: the writer's tree: one file an old, unretained version of another session holds
#: (a collection's candidate: the writer finds it present and skips its upload) and one
#: of its own
WRITTEN = {"copy.py": b"s1 0\n", "own.py": b"the writer's own file\n"}
#: the writer's fence (it is the only lease holder of its session)
FENCE = 1


def tree(files: dict[str, bytes]) -> Manifest:
    entries = [
        ManifestEntry(
            path=path,
            kind=EntryKind.FILE,
            digest=hashlib.sha256(data).hexdigest(),
            size=len(data),
        )
        for path, data in sorted(files.items())
    ]
    return Manifest(entries=tuple(entries))


def crashing(store: SessionStore, points: CrashPoints) -> None:
    """Every write of the store's backend passes a crash point first."""
    backend: Any = store.backend
    for name in ("create", "put", "delete"):
        original: Callable[..., Awaitable[None]] = getattr(backend, name)
        setattr(backend, name, _pass(points, original))


def _pass(
    points: CrashPoints, original: Callable[..., Awaitable[None]]
) -> Callable[..., Awaitable[None]]:
    async def write(*args: Any, **kwargs: Any) -> None:
        points.reached("store:write")
        await original(*args, **kwargs)

    return write


async def write(store: SessionStore, session_id: str) -> WorkspaceVersion:
    handle = await store.session(session_id)
    by_digest = {hashlib.sha256(data).hexdigest(): data for data in WRITTEN.values()}
    for _ in range(50):
        for digest in await store.workspaces.missing(by_digest):
            await store.workspaces.put_file(by_digest[digest])
        try:
            version = await store.workspaces.put_version(tree(WRITTEN), base=handle.state.workspace)
        except (InvalidInput, ConflictError):  # collected meanwhile: upload it again
            await asyncio.sleep(0.05)
            continue
        await handle.commit(Commit(workspace=version), fence=FENCE)
        return version
    raise AssertionError("the writer never got its version in")


async def run(mode: str, url: str, session_id: str) -> None:
    store = await open_store(url)  # the grace period a deployment has
    crashing(store, CrashPoints.from_env())
    try:
        if mode == "collect":
            collected = await store.workspaces.collect(session_id)
            print(f"collected {collected.blobs}", flush=True)
        else:
            version = await write(store, session_id)
            print(f"version {version.id}", flush=True)
    finally:
        await store.close()


def main() -> None:
    mode, url, session_id = sys.argv[1:]
    asyncio.run(run(mode, url, session_id))


if __name__ == "__main__":
    main()
