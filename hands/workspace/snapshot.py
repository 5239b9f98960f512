"""The snapshot of a run's tree: the manifest it became, refusing what a workspace may
not hold.

The tree is walked from its root's descriptor (``os.scandir`` on directory descriptors,
each opened with ``O_NOFOLLOW``): a symbolic link is recorded as a link with its target
as text, never followed. Refused (``WorkspaceRefused``): device files, sockets, FIFOs,
setuid, setgid and sticky bits, paths that are not workspace paths, link targets longer
than a manifest holds. Past the mount's limits (every entry — file, directory, link —
counts against ``max_files``; the files' bytes against ``max_bytes``) the walk stops:
``WorkspaceTooLarge``.

Only files whose status changed since the tree was materialised (or last hashed) are
read and hashed (``TreeState.trusted``); their content goes into the blob cache on the
way, from where it is uploaded. The rest keep their manifest entries as they were.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Final

from contracts.errors import WorkspaceRefused, WorkspaceTooLarge
from contracts.workspace import EntryKind, Manifest, ManifestEntry, WorkspaceLimits
from hands.workspace.cache import CHUNK, BlobCache
from hands.workspace.tree import Stat, TreeState, stat_of

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: the longest link target a manifest holds
MAX_TARGET: Final = 4096
#: the longest workspace path (``contracts.workspace.WorkspacePath``)
MAX_PATH: Final = 4096
_SPECIAL = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


@dataclass(frozen=True)
class Scan:
    """A tree as a manifest, each file's status, and the digests of the files read
    this time (their blobs are in the cache)."""

    manifest: Manifest
    stats: dict[str, Stat]
    hashed: frozenset[str]


def scan(root: Path, held: TreeState, limits: WorkspaceLimits, cache: BlobCache) -> Scan:
    """The tree at ``root`` as it is now (blocking: run it in a thread)."""
    walk = _Walk(held, limits, cache)
    fd = os.open(root, _DIRECTORY)
    try:
        walk.directory(fd, "")
    finally:
        os.close(fd)
    entries = tuple(sorted(walk.entries, key=attrgetter("path")))
    # every entry was validated when it was made (now or by an earlier version), and a
    # directory lists a name once: the manifest is built without checking each again
    return Scan(Manifest.trusted(entries=entries), walk.stats, frozenset(walk.hashed))


def _child(prefix: str, name: str) -> str:
    """The workspace path of ``name`` in the directory at ``prefix`` (checked already).
    A name the kernel lists holds no ``/`` or NUL and is never ``.`` or ``..``, so only
    the length is left to check (``contracts.workspace.normal_path``'s other rules hold
    by construction; an entry made new is checked in full)."""
    path = prefix + name
    if len(path) > MAX_PATH:
        raise WorkspaceRefused(
            f"workspace path {path[:80]!r}... is {len(path)} characters; at most {MAX_PATH}",
            path=path[:200],
        )
    return path


class _Walk:
    def __init__(self, held: TreeState, limits: WorkspaceLimits, cache: BlobCache) -> None:
        self.held = held
        self.before = {entry.path: entry for entry in held.manifest.entries}
        self.limits = limits
        self.cache = cache
        self.entries: list[ManifestEntry] = []
        self.stats: dict[str, Stat] = {}
        self.hashed: set[str] = set()
        self.bytes = 0

    def directory(self, fd: int, prefix: str) -> None:
        with os.scandir(fd) as found:
            for item in found:
                path = _child(prefix, item.name)
                self._count(path)
                status = item.stat(follow_symlinks=False)
                if not self._unchanged(path, status):
                    self._entry(fd, item.name, path, status)

    def _unchanged(self, path: str, status: os.stat_result) -> bool:
        """Keep the held entry of a plain file whose status is as recorded (the common
        case, so kept short: one look at each table); False: look closer."""
        mode = status.st_mode
        if not stat.S_ISREG(mode) or mode & _SPECIAL:
            return False
        now = (status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns)
        old = self.before.get(path)
        if old is None or old.kind is not EntryKind.FILE or old.mode != stat.S_IMODE(mode):
            return False
        if not self.held.trusted(path, now):
            return False
        self.bytes += now[0]
        self._within_bytes(path)
        self.stats[path] = now
        self.entries.append(old)  # trusted: a file, as recorded
        return True

    def _entry(self, parent: int, name: str, path: str, found: os.stat_result) -> None:
        kind = stat.S_IFMT(found.st_mode)
        if kind == stat.S_IFLNK:
            self._link(parent, name, path)
            return
        if kind in _KINDS:
            raise WorkspaceRefused(
                f"{path!r} is {_KINDS[kind]}: a workspace holds files, directories and links only",
                path=path,
            )
        if found.st_mode & _SPECIAL:
            raise WorkspaceRefused(
                f"{path!r} has the setuid, setgid or sticky bit "
                f"({stat.filemode(found.st_mode)}): a workspace keeps permission bits only",
                path=path,
            )
        mode = stat.S_IMODE(found.st_mode)
        if kind == stat.S_IFDIR:
            self._keep(ManifestEntry(path=path, kind=EntryKind.DIR, mode=mode))
            fd = os.open(name, _DIRECTORY, dir_fd=parent)
            try:
                self.directory(fd, path + "/")
            finally:
                os.close(fd)
            return
        self._file(parent, name, path, mode, found)

    def _link(self, parent: int, name: str, path: str) -> None:
        target = os.readlink(name, dir_fd=parent)
        if not target or len(target) > MAX_TARGET:
            raise WorkspaceRefused(
                f"{path!r} is a link to a target of {len(target)} characters (1-{MAX_TARGET})",
                path=path,
            )
        self._keep(ManifestEntry(path=path, kind=EntryKind.LINK, target=target))

    def _file(self, parent: int, name: str, path: str, mode: int, found: os.stat_result) -> None:
        self.bytes += found.st_size
        self._within_bytes(path)
        now = stat_of(found)
        old = self.before.get(path)
        if old is not None and old.kind is EntryKind.FILE and self.held.trusted(path, now):
            self.stats[path] = now
            self.entries.append(old if old.mode == mode else old.model_copy(update={"mode": mode}))
            return
        fd = os.open(name, _FILE, dir_fd=parent)
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):  # replaced since it was listed
                raise WorkspaceRefused(f"{path!r} changed while it was read", path=path)
            self.stats[path] = stat_of(opened)
            with os.fdopen(fd, "rb", closefd=False) as source, self.cache.writer() as blob:
                while chunk := source.read(CHUNK):
                    blob.write(chunk)
        finally:
            os.close(fd)
        self.bytes += blob.size - found.st_size
        self._within_bytes(path)
        self.hashed.add(blob.digest)
        self.entries.append(
            ManifestEntry(
                path=path, kind=EntryKind.FILE, mode=mode, digest=blob.digest, size=blob.size
            )
        )

    def _keep(self, entry: ManifestEntry) -> None:
        """``entry``, or the held one when it is the same (no new record built)."""
        old = self.before.get(entry.path)
        self.entries.append(old if old == entry else entry)

    def _count(self, path: str) -> None:
        if len(self.entries) + 1 > self.limits.max_files:
            raise WorkspaceTooLarge(
                f"the workspace holds more than {self.limits.max_files:,} entries (files, "
                f"directories and links; at {path!r}); the limit is max_files",
                limit=self.limits.max_files,
            )

    def _within_bytes(self, path: str) -> None:
        if self.bytes > self.limits.max_bytes:
            raise WorkspaceTooLarge(
                f"the workspace's files hold more than {self.limits.max_bytes:,} bytes (at "
                f"{path!r}); the limit is max_bytes",
                limit=self.limits.max_bytes,
            )
