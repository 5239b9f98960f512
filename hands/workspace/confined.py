"""File operations confined to one directory tree: nothing is read or written outside it.

Every path is a workspace path (``contracts.workspace.normal_path``: relative, normal, no
``..``, no NUL), walked one component at a time from the root's descriptor with
``O_NOFOLLOW``: a symbolic link on the way is an error, never followed, whatever a tool
left in the tree or a manifest names. A file is written under a temporary name in its
directory and renamed into place, so a hard link a tool made to it never carries the
new content elsewhere, and links are created as links (``symlink``), their targets
stored as text. What is created belongs to ``owner`` (uid, gid) when one is given.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Self

from contracts.errors import WorkspaceRefused
from contracts.workspace import normal_path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
Owner = tuple[int, int]


def checked(path: str) -> str:
    """``path`` when it is a normal workspace path; ``WorkspaceRefused`` otherwise."""
    try:
        normal = normal_path(path)
    except ValueError as error:
        raise WorkspaceRefused(str(error), path=path[:200]) from None
    if normal != path:
        raise WorkspaceRefused(
            f"workspace path {path[:80]!r} is not normal (it would be {normal[:80]!r})",
            path=path[:200],
        )
    return path


class Confined:
    """Operations on the tree at ``root`` (``with Confined(root) as tree: ...``)."""

    def __init__(self, root: Path, *, owner: Owner | None = None) -> None:
        self.root = root
        self.owner = owner
        self._dirs: dict[str, int] = {}

    def __enter__(self) -> Self:
        self._dirs[""] = os.open(self.root, _DIRECTORY)
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    # -- reading ---------------------------------------------------------------------------

    def lstat(self, path: str) -> os.stat_result | None:
        """The entry's own status (a link's, not its target's); None when absent."""
        parent, name = self._parent(path)
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read_file(self, path: str) -> bytes:
        """A regular file's content (never through a link)."""
        parent, name = self._parent(path)
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
        )
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise WorkspaceRefused(f"{path[:80]!r} is not a regular file", path=path[:200])
            return file.read()

    # -- writing ---------------------------------------------------------------------------

    def make_dir(self, path: str, mode: int) -> os.stat_result:
        """A directory at ``path`` (kept when it is one already) with ``mode``."""
        parent, name = self._parent(path)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
        fd = self._open_dir(parent, name, path)
        try:
            self._own(fd)
            os.fchmod(fd, mode)
            return os.fstat(fd)
        finally:
            os.close(fd)

    def write_file(self, path: str, mode: int, fill: Callable[[BinaryIO], None]) -> os.stat_result:
        """A new file at ``path`` (replacing a file there) that ``fill`` writes, with
        ``mode``; its status once in place."""
        parent, name = self._parent(path)
        draft = f".bh-{uuid.uuid4().hex}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(draft, flags, 0o600, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb", closefd=False) as file:
                fill(file)
            self._own(fd)
            os.fchmod(fd, mode)
            os.rename(draft, name, src_dir_fd=parent, dst_dir_fd=parent)
            return os.fstat(fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(draft, dir_fd=parent)
            raise
        finally:
            os.close(fd)

    def make_link(self, path: str, target: str) -> os.stat_result:
        """A symbolic link at ``path`` to ``target`` (text: never resolved here)."""
        parent, name = self._parent(path)
        os.symlink(target, name, dir_fd=parent)
        if self.owner is not None:
            os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)
        return os.stat(name, dir_fd=parent, follow_symlinks=False)

    def set_mode(self, path: str, mode: int) -> os.stat_result:
        """Change a file's or directory's permission bits (never through a link)."""
        parent, name = self._parent(path)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=parent)
        try:
            os.fchmod(fd, mode)
            return os.fstat(fd)
        finally:
            os.close(fd)

    def remove(self, path: str) -> None:
        """Remove what is at ``path`` (a directory with all it holds; absent is fine)."""
        parent, name = self._parent(path)
        try:
            found = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(found.st_mode):
            self._forget(path)
            shutil.rmtree(name, dir_fd=parent)
        else:
            os.unlink(name, dir_fd=parent)

    # -- walking ---------------------------------------------------------------------------

    def _parent(self, path: str) -> tuple[int, str]:
        """The descriptor of ``path``'s directory (every component opened without
        following a link) and its last name."""
        checked(path)
        directory, _, name = path.rpartition("/")
        return self._dir(directory), name

    def _dir(self, path: str) -> int:
        if path in self._dirs:
            return self._dirs[path]
        above, _, name = path.rpartition("/")
        fd = self._open_dir(self._dir(above), name, path)
        self._dirs[path] = fd
        return fd

    def _open_dir(self, parent: int, name: str, path: str) -> int:
        try:
            return os.open(name, _DIRECTORY, dir_fd=parent)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise WorkspaceRefused(
                    f"workspace path {path[:80]!r} is not a directory inside the tree (a "
                    "link or a file is in its place): nothing is written through it",
                    path=path[:200],
                ) from None
            raise

    def _forget(self, path: str) -> None:
        """Close the cached descriptors of ``path`` and of everything under it."""
        for cached in [p for p in self._dirs if p == path or p.startswith(path + "/")]:
            os.close(self._dirs.pop(cached))

    def _own(self, fd: int) -> None:
        if self.owner is not None:
            os.fchown(fd, *self.owner)
