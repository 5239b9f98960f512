"""Workspace snapshot, restore and storage (issue 32's performance targets), with
``docker commit`` of a container and a tar of the tree as baselines in the same run.

A workspace of ``--files`` files holding ``--megabytes`` in all is made on one Hands
(``hands.workspace.flow``, the real store). Then:

* **snapshot**, ``--repeats`` times: one file is changed and the tree snapshotted. Shown:
  the walk that finds the changed file (the Hands' own time), the whole snapshot (walk,
  ``missing``, one upload, the manifest put) and the store's ``put_version`` within it;
* **warm restore**: the same version restored on the Hands that holds its tree;
* **cold restore** (``--cold-store URL``, e.g. radosgw): a Hands with an empty cache
  materialises the last version from the store, against a plain parallel download of the
  same blobs (the store's blob reads, 10 at a time as ``aws s3 cp`` does, each written
  to a file) in the same run, alternating, ``--repeats`` times each;
* **storage** (``--storage-calls N``): N calls each change one file; the store's bytes
  (the SQLite file) against ``workspace + N changed files + manifests``;
* **baselines** (``--docker``): the same tree in a container's filesystem, one file
  changed, ``docker commit`` timed, and each commit's added size; a tar of the tree.

    python -m bench.workspace --files 10000 --megabytes 100 --repeats 5 \\
        --storage-calls 100 --docker --cold-store "s3://bench/ws?endpoint_url=$BH_RGW_ENDPOINT_URL"
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from bench.stats import median
from contracts import Operation
from contracts.tool import Termination
from contracts.workspace import (
    EntryKind,
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
from session_store import SessionStore, open_backend, open_store

EXITED = RunOutcome(termination=Termination.EXITED, exit_code=0, container="bench")
#: how many requests ``aws s3 cp`` makes at once by default (max_concurrent_requests)
PARALLEL_DOWNLOADS = 10
MB = 2**20


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


@dataclass
class Workspace:
    """A workspace made on one Hands, and what the rounds measured."""

    store: SessionStore
    flow: WorkspaceFlow
    versions: _Timed
    limits: WorkspaceLimits
    size: int
    base: WorkspaceVersion | None = None
    rounds: int = 0
    tree: Path | None = None
    walks: list[float] = field(default_factory=list)
    snapshots: list[float] = field(default_factory=list)
    puts: list[float] = field(default_factory=list)
    restores: list[float] = field(default_factory=list)

    @classmethod
    def on(cls, store: SessionStore, root: Path, files: int, megabytes: int) -> Workspace:
        versions = _Timed(versions_of(store))
        flow = WorkspaceFlow(cast(VersionStore, versions), root=root)
        limits = WorkspaceLimits(max_bytes=2 * megabytes * MB, max_files=2 * files)
        return cls(store, flow, versions, limits, megabytes * MB // files)

    async def call(self, files: int = 0, *, change: int = 7) -> None:
        """One ``rw`` call: the first writes ``files`` files, each later one changes one."""
        op = Operation(
            operation_id=f"op-{self.rounds}", session_id="s1", task_id="t1", tool="bench"
        )
        mount = WorkspaceMount(mode=WorkspaceMode.WRITE, base=self.base, limits=self.limits)
        self.flow.intend(op.operation_id, mount)
        started = time.perf_counter()
        prepared = await self.flow.prepare(op)
        restored = time.perf_counter() - started
        assert prepared is not None
        self.tree = prepared.tree
        if files:
            for i in range(files):
                folder = prepared.tree / f"d{i % 100:02}"
                folder.mkdir(exist_ok=True)
                (folder / f"f{i:05}.bin").write_bytes(os.urandom(self.size))
        else:
            self.restores.append(restored)
            target = prepared.tree / f"d{change % 100:02}" / f"f{change:05}.bin"
            target.write_bytes(os.urandom(self.size))
            held = self.flow._states[op.operation_id]
            started = time.perf_counter()
            await asyncio.to_thread(scan, prepared.tree, held, self.limits, self.flow.cache)
            self.walks.append(time.perf_counter() - started)
        started = time.perf_counter()
        self.versions.spent = 0.0
        concluded = await self.flow.conclude(op, EXITED)
        if not files:
            self.snapshots.append(time.perf_counter() - started)
            self.puts.append(self.versions.spent)
        assert concluded.version is not None, concluded
        self.base = concluded.version
        await self.flow.release(op)
        self.flow.forget(op.operation_id)
        self.rounds += 1


async def snapshot_and_warm_restore(files: int, megabytes: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bh-bench-ws-") as scratch:
        root = Path(scratch)
        store = await open_store(f"sqlite:///{root / 'store.db'}")
        workspace = Workspace.on(store, root / "hands", files, megabytes)
        await workspace.call(files)
        for _ in range(repeats):
            await workspace.call()
        await store.close()
    print(f"{files} files, {megabytes} MB; one file changed per round, {repeats} rounds")
    print(f"  walk (find and hash the changed file): median {_ms(workspace.walks)}")
    print(f"  whole snapshot (walk, missing, upload, manifest put): {_ms(workspace.snapshots)}")
    print(f"    of which the store's put_version: median {_ms(workspace.puts)}")
    print(f"  restore of the held version (warm Hands): median {_ms(workspace.restores)}")


async def cold_restore(url: str, files: int, megabytes: int, repeats: int) -> None:
    """A Hands with an empty cache against a plain parallel download, same blobs."""
    backend = await open_backend(url, create=True)
    await backend.close()
    store = await open_store(url)
    with tempfile.TemporaryDirectory(prefix="bh-bench-cold-") as scratch:
        root = Path(scratch)
        workspace = Workspace.on(store, root / "maker", files, megabytes)
        started = time.perf_counter()
        await workspace.call(files)
        made = time.perf_counter() - started
        version = workspace.base
        assert version is not None
        manifest = await store.workspaces.manifest(version)
        entries = [e for e in manifest.entries if e.kind is EntryKind.FILE]
        total = sum(e.size for e in entries) / MB
        ours, plain = [], []
        for n in range(repeats):
            plain.append(await _download(store, entries, root / f"plain-{n}"))
            ours.append(await _restore(store, version, root / f"cold-{n}"))
    await store.close()
    print(f"cold restore from {url.split('?')[0]} ({files} files, {total:.0f} MB)")
    print(f"  first snapshot (upload of every blob): {made:.1f} s")
    print(
        f"  cold restore (empty cache): median {median(ours):.2f} s = "
        f"{total / median(ours):.1f} MB/s"
    )
    print(
        f"  plain parallel download ({PARALLEL_DOWNLOADS} at once): median {median(plain):.2f} s "
        f"= {total / median(plain):.1f} MB/s"
    )
    print(f"  ratio (restore / download throughput): {median(plain) / median(ours):.2f}x")


async def _restore(store: SessionStore, version: WorkspaceVersion, root: Path) -> float:
    flow = WorkspaceFlow(versions_of(store), root=root)
    op = Operation(operation_id="op-cold", session_id="s2", task_id="t1", tool="bench")
    flow.intend(op.operation_id, WorkspaceMount(mode=WorkspaceMode.READ, base=version))
    started = time.perf_counter()
    assert await flow.prepare(op) is not None
    return time.perf_counter() - started


async def _download(store: SessionStore, entries: list[Any], root: Path) -> float:
    await asyncio.to_thread(root.mkdir, parents=True)
    gate = asyncio.Semaphore(PARALLEL_DOWNLOADS)

    async def one(index: int, entry: Any) -> None:
        async with gate:
            data = await store.workspaces.file(entry)
            await asyncio.to_thread((root / f"{index}").write_bytes, data)

    started = time.perf_counter()
    await asyncio.gather(*(one(i, e) for i, e in enumerate(entries)))
    return time.perf_counter() - started


async def storage(files: int, megabytes: int, calls: int) -> None:
    """The store's bytes after ``calls`` calls that each change one file."""
    with tempfile.TemporaryDirectory(prefix="bh-bench-storage-") as scratch:
        root = Path(scratch)
        database = root / "store.db"
        store = await open_store(f"sqlite:///{database}")
        workspace = Workspace.on(store, root / "hands", files, megabytes)
        await workspace.call(files)
        manifests = 0
        for n in range(calls):
            await workspace.call(change=n)
            assert workspace.base is not None
            manifests += workspace.base.manifest.size
        await store.close()
        after = _bytes(database)
    data = megabytes * MB + calls * workspace.size
    bound = data + manifests
    print(f"storage after {calls} calls each changing one {workspace.size / 1024:.0f} KB file")
    print(f"  the store's file (SQLite, after close): {after / MB:.1f} MB")
    print(
        f"  workspace + {calls} changed files + manifests = {data / MB:.1f} + "
        f"{manifests / MB:.1f} MB = {bound / MB:.1f} MB; the store holds {after / bound:.2f}x that"
    )
    print(f"  ({calls} full copies would be {calls * megabytes / 1024:.1f} GB)")


def _bytes(database: Path) -> int:
    return sum(p.stat().st_size for p in database.parent.glob(database.name + "*"))


def baselines(files: int, megabytes: int, repeats: int, docker_url: str) -> None:
    """``docker commit`` of a container holding the tree, and a tar of the tree."""
    import docker

    size = megabytes * MB // files
    with tempfile.TemporaryDirectory(prefix="bh-bench-base-") as scratch:
        tree = Path(scratch) / "tree"
        for i in range(files):
            folder = tree / f"d{i % 100:02}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i:05}.bin").write_bytes(os.urandom(size))
        tars = []
        for n in range(repeats):
            (tree / "d07" / "f00007.bin").write_bytes(os.urandom(size))
            started = time.perf_counter()
            subprocess.run(["tar", "-cf", f"{scratch}/t{n}.tar", "-C", str(tree), "."], check=True)
            tars.append(time.perf_counter() - started)
        tar_size = Path(f"{scratch}/t0.tar").stat().st_size
        client = docker.DockerClient(base_url=docker_url)
        container = client.containers.create(
            "brainhands/base:bookworm",
            ["sleep", "infinity"],
            name=f"bh-bench-{uuid.uuid4().hex[:8]}",
        )
        commits, sizes, images = [], [], []
        try:
            container.start()
            archive = io.BytesIO()
            with tarfile.open(fileobj=archive, mode="w") as out:
                out.add(tree, arcname="workspace")
            container.put_archive("/", archive.getvalue())
            for n in range(repeats):
                one = io.BytesIO()
                with tarfile.open(fileobj=one, mode="w") as out:
                    out.add(tree / "d07" / "f00007.bin", arcname="workspace/d07/f00007.bin")
                container.put_archive("/", one.getvalue())
                started = time.perf_counter()
                image = container.commit(repository="bh-bench-commit", tag=f"r{n}")
                commits.append(time.perf_counter() - started)
                images.append(image.id)
                history = client.api.history(image.id)
                sizes.append(history[0]["Size"])
        finally:
            container.remove(force=True)
            for image_id in reversed(images):
                client.images.remove(image_id, force=True)
            client.close()
    print(
        f"baselines ({files} files, {megabytes} MB, one file changed per round, {repeats} rounds)"
    )
    print(f"  tar of the tree: median {_ms(tars)}, {tar_size / MB:.1f} MB per snapshot")
    print(
        f"  docker commit: median {_ms(commits)}, each commit adds "
        f"{median([float(s) for s in sizes]) / MB:.1f} MB"
    )


def _ms(values: list[float]) -> str:
    return f"{median(values) * 1000:.1f} ms"


async def main(options: argparse.Namespace) -> None:
    await snapshot_and_warm_restore(options.files, options.megabytes, options.repeats)
    if options.cold_store:
        await cold_restore(options.cold_store, options.files, options.megabytes, options.repeats)
    if options.storage_calls:
        await storage(options.files, options.megabytes, options.storage_calls)
    if options.docker:
        docker_url = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        await asyncio.to_thread(
            baselines, options.files, options.megabytes, options.repeats, docker_url
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold-store", help="a store URL for the cold restore (e.g. radosgw)")
    parser.add_argument("--storage-calls", type=int, default=0)
    parser.add_argument("--docker", action="store_true", help="docker commit and tar baselines")
    asyncio.run(main(parser.parse_args()))
