"""The executor's part of a call that mounts its session's workspace.

The mount comes from the call's committed intent (``intend``: the store decides, never
the message). Then, for one run:

1. ``prepare`` (before the claim, so that a materialisation that fails — the store
   away, a manifest refused — spends no attempt, and a long one does not eat the
   claim's time to start): the session's idle tree is taken if this Hands has one, the
   base version is materialised in it by difference (``hands.workspace.tree``), and an
   empty artifacts directory is made; a fresh run always starts from the base again (a
   replay sees the same files).
2. ``attach`` (a reconnect): the run's directories as the crashed Hands left them.
3. ``conclude`` after a run that ran to its end (exited, whatever its code, or
   ``invalid_output``): its artifacts, and for ``rw`` its tree snapshotted
   (``hands.workspace.snapshot``), the blobs the store lacks uploaded, the version put.
   A refused or oversized tree makes the result a failure with that code and no
   version. A run that did not run to its end (timeout, cancelled, OOM-killed,
   interrupted, output limit) produces neither.
4. ``release``: a tree known to equal a version (the one produced, or an ``ro`` run's
   unchanged base) becomes the session's idle tree again; any other is removed.

Queries mount nothing: they ask the outside world about an operation and must not act,
and the tree of the attempt they ask about is not known.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from contracts import (
    BlobRef,
    BrainhandsError,
    ErrorInfo,
    InvalidInput,
    Operation,
    OperationResult,
    PayloadTooLarge,
)
from contracts.errors import WorkspaceRefused, WorkspaceTooLarge
from contracts.tool import Termination
from contracts.workspace import (
    Artifact,
    Manifest,
    ManifestEntry,
    WorkspaceMode,
    WorkspaceMount,
    WorkspaceVersion,
)
from hands.sandbox import RunOutcome
from hands.sandbox.hardening import SANDBOX_USER
from hands.workspace import artifacts as artifact_files
from hands.workspace.cache import BlobCache, CorruptBlob
from hands.workspace.confined import Confined, Owner
from hands.workspace.layout import Layout, RunDirectories
from hands.workspace.mount import RunMount, mount_target
from hands.workspace.snapshot import scan
from hands.workspace.store import VersionStore, versions_of
from hands.workspace.tree import EMPTY, TreeState, digests, materialise, stamp
from runtime.crashpoints import CrashPoints
from session_store import SessionStore

log = logging.getLogger(__name__)

#: runs that ran to their end: their tree and artifacts are what they left
RAN_TO_END: Final = frozenset({Termination.EXITED, Termination.INVALID_OUTPUT})
#: blobs fetched or uploaded at once
_TRANSFERS = 16
#: tries of ``put_version`` when blobs went missing under it (``_put_version``)
_VERSION_ATTEMPTS = 3
#: manifests kept parsed in memory (by version id)
_MANIFESTS = 8


def sandbox_owner() -> Owner | None:
    """Who owns a tree's files: the sandbox user when this Hands may give files away
    (root), else nobody (the process sandbox runs tools as the Hands' own user)."""
    if os.geteuid() != 0:
        return None
    uid, gid = SANDBOX_USER.split(":")
    return (int(uid), int(gid))


@dataclass(frozen=True)
class Concluded:
    """What a run's workspace became: the ``version`` it produced (``rw``), the
    ``artifacts`` it published, or the ``error`` that fails its result (refused, too
    large); ``lost``: its tree is not on this Hands, so what it did is unknown."""

    version: WorkspaceVersion | None = None
    artifacts: tuple[Artifact, ...] = ()
    error: ErrorInfo | None = None
    lost: bool = False


#: a run that mounts no workspace
NOTHING_CONCLUDED: Final = Concluded()


class WorkspaceFlow:
    """Workspaces of the calls one executor runs (``root``: its trees and runs)."""

    def __init__(
        self,
        versions: VersionStore,
        *,
        root: Path,
        cache: BlobCache | None = None,
        owner: Owner | None = None,
        keep_trees: int = 16,
    ) -> None:
        self.versions = versions
        self.layout = Layout(root, keep=keep_trees)
        self.cache = cache or BlobCache(root / "cache", max_bytes=2 * 2**30)
        self.owner = owner
        self._mounts: dict[str, WorkspaceMount] = {}
        self._told: set[str] = set()
        #: the idle trees this process gave back, by session (read back only when another
        #: process gave one back since: ``TreeState.generation``)
        self._idle: dict[str, TreeState] = {}
        self._states: dict[str, TreeState] = {}
        self._keep: dict[str, TreeState] = {}
        self._manifests: OrderedDict[str, Manifest] = OrderedDict()
        self._transfers = asyncio.Semaphore(_TRANSFERS)
        #: the executor's crash points (``runtime.crashpoints``): the crash tests kill a
        #: Hands before, during and after a snapshot's upload
        self.crash = CrashPoints()

    @classmethod
    def default(cls, store: SessionStore) -> WorkspaceFlow:
        """Trees and cache of its own under the host's temporary directory (made when
        first used), for an executor given none (tests, embedded use): never shared,
        so nothing is found again after a restart. The Hands service passes
        ``BH_HANDS_WORKSPACE_CACHE``."""
        root = Path(tempfile.gettempdir()) / f"bh-workspaces-{uuid.uuid4().hex}"
        return cls(versions_of(store), root=root, owner=sandbox_owner())

    @classmethod
    def of(cls, store: SessionStore, root: Path, *, cache_bytes: int) -> WorkspaceFlow:
        """A Hands service's: trees and runs under ``root``, its cache in ``root/cache``."""
        cache = BlobCache(root / "cache", max_bytes=cache_bytes)
        owner = sandbox_owner()
        if owner is None:
            log.warning(
                "the Hands do not run as root: working trees stay theirs, so a Docker "
                "sandbox's user (%s) can read a workspace but not write it",
                SANDBOX_USER,
            )
        return cls(versions_of(store), root=root.absolute(), cache=cache, owner=owner)

    def knows(self, operation_id: str) -> bool:
        """Whether the operation's mount was told (``intend``)."""
        return operation_id in self._mounts or operation_id in self._told

    def intend(self, operation_id: str, mount: WorkspaceMount | None) -> None:
        """The mount the operation's committed intent froze (None: it mounts none)."""
        self._told.add(operation_id)
        if mount is None or mount.mode is WorkspaceMode.NONE:
            self._mounts.pop(operation_id, None)
        else:
            self._mounts[operation_id] = mount

    def forget(self, operation_id: str) -> None:
        """Done with it here (its directories stay until ``release``)."""
        self._told.discard(operation_id)
        self._mounts.pop(operation_id, None)
        self._states.pop(operation_id, None)
        self._keep.pop(operation_id, None)

    def mounts(self, operation_id: str) -> bool:
        return operation_id in self._mounts

    # -- before the run --------------------------------------------------------------------

    async def prepare(self, record: Operation) -> RunMount | None:
        """The run's directories with its base materialised (None: it mounts none).
        ``WorkspaceRefused`` when the base names a path outside the tree."""
        mount = self._mounts.get(record.operation_id)
        if mount is None:
            return None
        target_path = _target(mount)
        base = mount.base
        manifest = await self._manifest(base)
        run = await asyncio.to_thread(self.layout.fresh, record.operation_id)
        state = await self._materialise(record, run, manifest, base)
        await asyncio.to_thread(self._artifacts_directory, run)
        self._states[record.operation_id] = state
        return RunMount(mode=mount.mode, path=target_path, tree=run.tree, artifacts=run.artifacts)

    def attach(self, record: Operation) -> RunMount | None:
        """A reconnect: the run's directories as they are (None: it mounts none, or they
        are not on this Hands)."""
        mount = self._mounts.get(record.operation_id)
        run = self.layout.run(record.operation_id)
        if mount is None or not run.tree.is_dir():
            return None
        state = TreeState.load(run.state)
        if state is not None:
            self._states[record.operation_id] = state
        return RunMount(
            mode=mount.mode, path=_target(mount), tree=run.tree, artifacts=run.artifacts
        )

    async def _materialise(
        self,
        record: Operation,
        run: RunDirectories,
        manifest: Manifest,
        base: WorkspaceVersion | None,
    ) -> TreeState:
        version = base.id if base is not None else None
        for attempt in range(2):  # a damaged cached blob: dropped, and once more from scratch
            held = await asyncio.to_thread(self._take, record, run, attempt)
            if held is not None and held.version == version:
                # the new stamp is not saved: after a crash the saved, older one trusts
                # fewer files (more are hashed again), never a changed one
                held.stamp = await asyncio.to_thread(stamp, run.tree, held.stats.values())
                return held
            needed = digests(manifest.entries) - digests(held.manifest.entries if held else ())
            with self.cache.pinned(needed):
                await self._fetch(manifest, needed)
                try:
                    state = await asyncio.to_thread(
                        materialise,
                        run.tree,
                        held,
                        manifest,
                        version,
                        self._copy,
                        owner=self.owner,
                    )
                except CorruptBlob:
                    continue
            await asyncio.to_thread(state.save, run.state)
            return state
        raise InvalidInput(f"the workspace of {record.operation_id} could not be materialised")

    def _take(self, record: Operation, run: RunDirectories, attempt: int) -> TreeState | None:
        """The session's idle tree in the run's directory (None: an empty tree there)."""
        held = None
        kept = self._idle.pop(record.session_id, None)
        if attempt == 0 and self.layout.take(record.session_id, record.operation_id):
            same = kept is not None and kept.generation == TreeState.generation_at(run.state)
            held = kept if same else TreeState.load(run.state)
        if held is None:
            self.layout.clear(record.operation_id)
            run.root.mkdir(parents=True, mode=0o700)
            run.held.mkdir(mode=0o700)
            run.tree.mkdir(mode=0o755)
            if self.owner is not None:
                os.chown(run.tree, *self.owner)
        return held

    def _copy(self, digest: str, file: BinaryIO) -> None:
        if not self.cache.copy_into(digest, file):
            raise CorruptBlob(f"blob {digest} left the cache before it was copied")

    async def _fetch(self, manifest: Manifest, needed: set[str]) -> None:
        """Into the cache: the file blobs ``needed`` that it lacks, from the store."""
        wanted = {e.digest: e for e in manifest.entries if e.digest in needed}
        lacking = [entry for digest, entry in wanted.items() if not self.cache.has(digest)]

        async def one(entry: ManifestEntry) -> None:
            async with self._transfers:
                data = await self.versions.file(entry)
                await asyncio.to_thread(self.cache.put, data)

        await asyncio.gather(*(one(entry) for entry in lacking))

    async def _manifest(self, version: WorkspaceVersion | None) -> Manifest:
        """A version's manifest: from memory, the cache (its id is its blob's digest), or
        the store."""
        if version is None:
            return EMPTY
        if version.id in self._manifests:
            self._manifests.move_to_end(version.id)
            return self._manifests[version.id]
        data = await asyncio.to_thread(self.cache.read, version.id)
        if data is not None:
            manifest = Manifest.model_validate_json(data)
        else:
            manifest = await self.versions.manifest(version)
            await asyncio.to_thread(self.cache.put, manifest.canonical())
        self._remember(version.id, manifest)
        return manifest

    def _remember(self, version_id: str, manifest: Manifest) -> None:
        self._manifests[version_id] = manifest
        while len(self._manifests) > _MANIFESTS:
            self._manifests.popitem(last=False)

    def _artifacts_directory(self, run: RunDirectories) -> None:
        run.artifacts.mkdir(mode=0o755)
        if self.owner is not None:
            os.chown(run.artifacts, *self.owner)

    # -- after the run ---------------------------------------------------------------------

    async def conclude(self, record: Operation, outcome: RunOutcome) -> Concluded:
        """What the run's workspace became (nothing when it mounts none or did not run
        to its end)."""
        mount = self._mounts.get(record.operation_id)
        if mount is None or outcome.termination not in RAN_TO_END:
            return Concluded()
        run = self.layout.run(record.operation_id)
        state = self._states.get(record.operation_id) or TreeState.load(run.state)
        if state is None or not run.tree.is_dir() or not run.artifacts.is_dir():
            return Concluded(lost=True)
        try:
            published = await self._publish(run, mount)
            if mount.mode is WorkspaceMode.WRITE:
                version = await self._snapshot(record, run, mount, state)
                return Concluded(version=version, artifacts=published)
            await self._unchanged(record, run, mount, state)
            return Concluded(artifacts=published)
        except (WorkspaceRefused, WorkspaceTooLarge) as error:
            return Concluded(error=error.info())

    async def _snapshot(
        self, record: Operation, run: RunDirectories, mount: WorkspaceMount, held: TreeState
    ) -> WorkspaceVersion:
        found = await asyncio.to_thread(scan, run.tree, held, mount.limits, self.cache)
        new = found.hashed - digests(held.manifest.entries)
        lacking = await self.versions.missing(new)
        paths = {e.digest: e.path for e in found.manifest.entries if e.digest in lacking}
        self.crash.reached("hands:workspace:before_upload")
        refs = await asyncio.gather(
            *(self._upload(digest, run, paths[digest], crash_point=True) for digest in lacking)
        )
        version = await self._put_version(run, found.manifest, mount, new)
        self.crash.reached("hands:workspace:version_put")
        log.info(
            "operation %s: version %s from %s: %d new blob(s), %d uploaded (%d bytes), "
            "%d already in the store",
            record.operation_id,
            version.id[:12],
            mount.base.id[:12] if mount.base else "the empty workspace",
            len(new),
            len(refs),
            sum(ref.size for ref in refs),
            len(new) - len(refs),
        )
        self._remember(version.id, found.manifest)
        self._keep[record.operation_id] = TreeState(
            version.id, found.manifest, found.stats, held.stamp
        )
        return version

    async def _put_version(
        self, run: RunDirectories, manifest: Manifest, mount: WorkspaceMount, new: AbstractSet[str]
    ) -> WorkspaceVersion:
        """``put_version``; when the store says files are missing (a collection deleted
        a blob ``missing`` had found present, before this writer's touch), ask again,
        upload what it lacks, and retry — a few times, then the refusal stands."""
        paths = {e.digest: e.path for e in manifest.entries if e.digest in new}
        for _ in range(_VERSION_ATTEMPTS - 1):
            try:
                return await self.versions.put_version(manifest, base=mount.base)
            except InvalidInput as refused:
                if "missing" not in refused.details:
                    raise
            lacking = await self.versions.missing(new)
            log.info("%d blob(s) went missing before the version: uploaded again", len(lacking))
            await asyncio.gather(*(self._upload(digest, run, paths[digest]) for digest in lacking))
        return await self.versions.put_version(manifest, base=mount.base)

    async def _unchanged(
        self, record: Operation, run: RunDirectories, mount: WorkspaceMount, held: TreeState
    ) -> None:
        """An ``ro`` run's tree is kept when it still holds its base (a sandbox that
        mounts it read-only guarantees it; the process sandbox does not)."""
        found = await asyncio.to_thread(scan, run.tree, held, mount.limits, self.cache)
        if found.manifest == held.manifest:
            self._keep[record.operation_id] = TreeState(
                held.version, held.manifest, found.stats, held.stamp
            )

    async def _publish(self, run: RunDirectories, mount: WorkspaceMount) -> tuple[Artifact, ...]:
        found = await asyncio.to_thread(
            artifact_files.found, run.artifacts, mount.limits, self.cache
        )
        published = []
        for artifact in found:
            blob = await self._upload(artifact.digest, run, None, artifacts=artifact.name)
            published.append(
                Artifact(name=artifact.name, blob=blob, media_type=artifact.media_type)
            )
        return tuple(published)

    async def _upload(
        self,
        digest: str,
        run: RunDirectories,
        path: str | None,
        *,
        artifacts: str | None = None,
        crash_point: bool = False,
    ) -> BlobRef:
        """Put one blob (from the cache, else the run's file, checked) in the store
        (``crash_point``: a snapshot's file, whose upload is a crash point)."""
        async with self._transfers:
            data = await asyncio.to_thread(self.cache.read, digest)
            if data is None:
                data = await asyncio.to_thread(_reread, run, path, artifacts, digest)
            try:
                ref = await self.versions.put_file(data)
            except PayloadTooLarge as error:
                raise WorkspaceTooLarge(
                    f"{path or artifacts!r} is {len(data):,} bytes: more than the store "
                    f"keeps in one blob ({error.message})",
                    path=path or artifacts,
                ) from None
        if crash_point:
            self.crash.reached("hands:workspace:uploaded")
        return ref

    # -- the end ---------------------------------------------------------------------------

    async def release(self, record: Operation) -> None:
        """The run's tree becomes its session's idle tree when it is known to equal a
        version; the run's directories go."""
        state = self._keep.pop(record.operation_id, None)
        here = self.layout.run(record.operation_id).root.exists()
        if record.operation_id not in self._mounts and state is None and not here:
            return
        await asyncio.to_thread(self._release, record, state)

    def _release(self, record: Operation, state: TreeState | None) -> None:
        if state is not None:
            state.save(self.layout.run(record.operation_id).state)
            if self.layout.give_back(record.session_id, record.operation_id):
                self._idle[record.session_id] = state
                while len(self._idle) > self.layout.keep:
                    self._idle.pop(next(iter(self._idle)))
        self.layout.clear(record.operation_id)

    async def sweep(self, settled: Callable[[str], Awaitable[bool]]) -> list[str]:
        """Remove the run directories of operations settled elsewhere or left by a crash
        (``settled``: whether an operation's result is written), except runs this
        executor is handling."""
        removed = []
        for operation_id in await asyncio.to_thread(self.layout.runs):
            if operation_id in self._mounts or not await settled(operation_id):
                continue
            await asyncio.to_thread(self.layout.clear, operation_id)
            removed.append(operation_id)
        return removed


def refused_result(record: Operation, refused: BrainhandsError) -> OperationResult:
    """The result of a run whose workspace could not be materialised (its base names
    what a workspace may not hold): failed with the error's code, nothing run."""
    return OperationResult(
        operation_id=record.operation_id,
        session_id=record.session_id,
        succeeded=False,
        error=refused.info(),
        path="refused",
    )


def _target(mount: WorkspaceMount) -> str:
    try:
        return mount_target(mount.path)
    except ValueError as error:
        raise WorkspaceRefused(str(error)) from None


def _reread(run: RunDirectories, path: str | None, artifact: str | None, digest: str) -> bytes:
    """A blob the cache no longer holds (evicted meanwhile), read again from the run."""

    where = run.tree if path is not None else run.artifacts
    name = path if path is not None else artifact
    assert name is not None
    with Confined(where) as tree:
        data = tree.read_file(name)
    if hashlib.sha256(data).hexdigest() != digest:
        raise WorkspaceRefused(f"{name!r} changed while it was being uploaded", path=name)
    return data
