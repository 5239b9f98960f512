"""Workspace snapshot and restore on one Hands (issue 32's performance targets).

A workspace of ``--files`` files holding ``--megabytes`` in all is materialised (the
SQLite store, this host's disk); then, ``--repeats`` times, one file is changed and the
tree snapshotted, and the same version restored on a warm Hands (its tree held). Shown:
the walk that finds the changed file (the Hands' own time), the whole snapshot (walk,
``missing``, one upload, the manifest put), and the restore of an unchanged tree.

    python -m bench.workspace --files 10000 --megabytes 100 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from bench.stats import median
from contracts import Operation
from contracts.tool import Termination
from contracts.workspace import (
    Manifest,
    WorkspaceLimits,
    WorkspaceMode,
    WorkspaceMount,
    WorkspaceVersion,
)
from hands.sandbox import RunOutcome
from hands.workspace.flow import WorkspaceFlow
from hands.workspace.snapshot import scan
from hands.workspace.store import VersionStore, versions_of
from session_store import open_store


class _Timed:
    """The store's workspace side, timing ``put_version`` (the store's own checks)."""

    def __init__(self, versions: VersionStore) -> None:
        self._versions = versions
        self.spent = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._versions, name)

    async def put_version(
        self, manifest: Manifest, *, base: WorkspaceVersion | None
    ) -> WorkspaceVersion:
        started = time.perf_counter()
        try:
            return await self._versions.put_version(manifest, base=base)
        finally:
            self.spent += time.perf_counter() - started


EXITED = RunOutcome(termination=Termination.EXITED, exit_code=0, container="bench")


async def main(files: int, megabytes: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bh-bench-ws-") as scratch:
        root = Path(scratch)
        store = await open_store(f"sqlite:///{root / 'store.db'}")
        versions = _Timed(versions_of(store))
        flow = WorkspaceFlow(cast(VersionStore, versions), root=root / "hands")
        limits = WorkspaceLimits(max_bytes=2 * megabytes * 2**20, max_files=2 * files)
        size = megabytes * 2**20 // files
        base = None
        walks, snapshots, restores, puts = [], [], [], []
        for round_ in range(repeats + 1):
            op = Operation(operation_id=f"op-{round_}", session_id="s1", task_id="t1", tool="bench")
            flow.intend(
                op.operation_id, WorkspaceMount(mode=WorkspaceMode.WRITE, base=base, limits=limits)
            )
            started = time.perf_counter()
            mount = await flow.prepare(op)
            restored = time.perf_counter() - started
            assert mount is not None
            if round_ == 0:
                for i in range(files):
                    folder = mount.tree / f"d{i % 100:02}"
                    folder.mkdir(exist_ok=True)
                    (folder / f"f{i:05}.bin").write_bytes(os.urandom(size))
            else:
                restores.append(restored)
                (mount.tree / "d07" / "f00007.bin").write_bytes(os.urandom(size))
                held = flow._states[op.operation_id]
                started = time.perf_counter()
                await asyncio.to_thread(scan, mount.tree, held, limits, flow.cache)
                walks.append(time.perf_counter() - started)
            started = time.perf_counter()
            versions.spent = 0.0
            concluded = await flow.conclude(op, EXITED)
            if round_:
                snapshots.append(time.perf_counter() - started)
                puts.append(versions.spent)
            assert concluded.version is not None, concluded
            base = concluded.version
            await flow.release(op)
            flow.forget(op.operation_id)
        await store.close()
    print(f"{files} files, {megabytes} MB; one file changed per round, {repeats} rounds")
    print(f"  walk (find and hash the changed file): median {median(walks) * 1000:.1f} ms")
    whole = median(snapshots) * 1000
    print(f"  whole snapshot (walk, missing, upload, manifest put): median {whole:.1f} ms")
    print(f"    of which the store's put_version: median {median(puts) * 1000:.1f} ms")
    print(f"  restore of the held version (warm Hands): median {median(restores) * 1000:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.files, options.megabytes, options.repeats))
