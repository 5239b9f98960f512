"""A run's artifacts: the files it left in its artifacts directory (``$BH_ARTIFACTS``).

Each regular file directly in the directory is one artifact, named by its file name
(``contracts.workspace.Artifact``: a letter or digit, then letters, digits, ``.``,
``_``, ``-``; at most 128 characters). Anything else is refused the way a workspace
refuses it (``WorkspaceRefused``): a directory, a link, a device file, a socket, a FIFO,
a setuid or setgid bit, a name an artifact cannot have. Together they are bounded by the
mount's limits (``WorkspaceTooLarge``). Their content goes into the blob cache as it is
read (``found``); the caller uploads it.
"""

from __future__ import annotations

import mimetypes
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import WorkspaceRefused, WorkspaceTooLarge
from contracts.workspace import WorkspaceLimits
from hands.workspace.cache import CHUNK, BlobCache

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: ``contracts.workspace.Artifact.name``
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Found:
    """One artifact's file: its name, its content's digest (in the cache) and size."""

    name: str
    digest: str
    size: int

    @property
    def media_type(self) -> str:
        return mimetypes.guess_type(self.name)[0] or "application/octet-stream"


def found(root: Path, limits: WorkspaceLimits, cache: BlobCache) -> list[Found]:
    """The artifacts in ``root``, by name (blocking: run it in a thread)."""
    fd = os.open(root, _DIRECTORY)
    try:
        with os.scandir(fd) as listing:
            items = sorted(listing, key=lambda item: item.name)
        if len(items) > limits.max_files:
            raise WorkspaceTooLarge(
                f"the run published {len(items):,} artifacts; at most {limits.max_files:,} "
                "(max_files)",
                limit=limits.max_files,
            )
        kept: list[Found] = []
        for item in items:
            kept.append(_one(fd, item.name, item.stat(follow_symlinks=False), cache))
            if sum(artifact.size for artifact in kept) > limits.max_bytes:
                raise WorkspaceTooLarge(
                    f"the run's artifacts hold more than {limits.max_bytes:,} bytes (at "
                    f"{item.name!r}); the limit is max_bytes",
                    limit=limits.max_bytes,
                )
        return kept
    finally:
        os.close(fd)


def _one(parent: int, name: str, status: os.stat_result, cache: BlobCache) -> Found:
    shown = name[:80]
    if not _NAME.fullmatch(name):
        raise WorkspaceRefused(
            f"artifact {shown!r}: a name is a letter or digit, then letters, digits, '.', "
            "'_' or '-' (at most 128 characters)",
            artifact=shown,
        )
    if not stat.S_ISREG(status.st_mode):
        raise WorkspaceRefused(
            f"artifact {shown!r} is not a regular file ({stat.filemode(status.st_mode)}): "
            "an artifact is a file directly in $BH_ARTIFACTS (no directory, link or device)",
            artifact=shown,
        )
    if status.st_mode & (stat.S_ISUID | stat.S_ISGID):
        raise WorkspaceRefused(f"artifact {shown!r} has the setuid or setgid bit", artifact=shown)
    fd = os.open(name, _FILE, dir_fd=parent)
    try:
        with os.fdopen(fd, "rb", closefd=False) as source, cache.writer() as blob:
            while chunk := source.read(CHUNK):
                blob.write(chunk)
    finally:
        os.close(fd)
    return Found(name, blob.digest, blob.size)
