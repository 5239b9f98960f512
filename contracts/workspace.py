"""Workspaces and artifacts: the files that outlive a tool call (``docs/workspaces.md``).

A session's **workspace** is a file tree that changes only by applied versions. A
**version** is an immutable manifest — every path with its kind, mode and content hash —
produced by one operation from one base version; file contents are content-addressed
blobs in the store's blob space. The manifest is a blob too, and its digest is the
version's id: the same tree is the same version wherever it was made. The session's
**head** is the version its last applied write produced; the commit that applies an
operation's result advances it — once, fenced, like every other result.

A tool declares how it mounts the workspace (``WorkspaceAccess``, image label
``io.brainhands.tool.workspace``: ``rw:/work``, ``ro:/work`` or none); a call's intent
records the mount and the version it starts from (``WorkspaceMount``); its result, the
version it produced (``WorkspaceVersion``) and the **artifacts** it published
(``Artifact``: named, immutable outputs, blobs referenced by the result).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import Field, StringConstraints, model_validator

from contracts.blob import BlobRef, Digest
from contracts.model import AwareDatetime, Frozen

#: where a tool sees the workspace when its label names no path
DEFAULT_MOUNT: Final = "/workspace"
#: permission bits a workspace keeps (no setuid, setgid or sticky bit: refused)
PERMISSION_BITS: Final = 0o777

_PATH = re.compile(r"[^\x00]{1,4096}")


def normal_path(path: str) -> str:
    """``path`` as a workspace path: relative, POSIX, normalised, inside the root; a
    ``ValueError`` naming what is wrong otherwise (absolute, ``..``, empty, NUL)."""
    if not _PATH.fullmatch(path) or path.startswith("/"):
        raise ValueError(f"workspace path {path[:80]!r} must be relative, 1-4096 characters")
    normal = posixpath.normpath(path)
    if normal == "." or normal == ".." or normal.startswith("../"):
        raise ValueError(f"workspace path {path[:80]!r} leaves the workspace's root")
    return normal


WorkspacePath = Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class WorkspaceMode(StrEnum):
    NONE = "none"
    READ = "ro"
    WRITE = "rw"


class WorkspaceAccess(Frozen):
    """How a tool mounts its session's workspace (its image's label): not at all (the
    default), read-only, or read-write, at ``path`` inside its sandbox."""

    mode: WorkspaceMode = WorkspaceMode.NONE
    path: str = Field(default=DEFAULT_MOUNT, pattern=r"^/[A-Za-z0-9._/-]{1,200}$")

    @property
    def mounts(self) -> bool:
        return self.mode is not WorkspaceMode.NONE


class WorkspaceLimits(Frozen):
    """The most a workspace may hold (operator settings): a write past either fails its
    operation with ``workspace_too_large`` and leaves the previous version as it was."""

    max_bytes: int = Field(default=1024**3, ge=1)
    max_files: int = Field(default=100_000, ge=1)


class EntryKind(StrEnum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"


class ManifestEntry(Frozen):
    """One path of a version: a file (its content's digest and size), a directory, or a
    symbolic link (its target, stored as text and never followed)."""

    path: WorkspacePath
    kind: EntryKind
    #: permission bits (``PERMISSION_BITS``); links have none
    mode: int = Field(default=0o644, ge=0, le=PERMISSION_BITS)
    digest: Digest | None = None
    size: int = Field(default=0, ge=0)
    target: str | None = Field(default=None, max_length=4096)

    @model_validator(mode="after")
    def _consistent(self) -> ManifestEntry:
        normal_path(self.path)
        if (self.kind is EntryKind.FILE) != (self.digest is not None):
            raise ValueError(f"{self.path}: a file, and only a file, has a digest")
        if (self.kind is EntryKind.LINK) != (self.target is not None):
            raise ValueError(f"{self.path}: a link, and only a link, has a target")
        return self


class Manifest(Frozen):
    """A workspace tree: its entries in path order (``entries``), each path once."""

    v: Literal[1] = 1
    type: Literal["workspace_manifest"] = "workspace_manifest"
    entries: tuple[ManifestEntry, ...] = ()

    @model_validator(mode="after")
    def _ordered(self) -> Manifest:
        paths = [entry.path for entry in self.entries]
        if paths != sorted(set(paths)):
            raise ValueError("a manifest's paths are unique and in order")
        return self

    @property
    def files(self) -> int:
        return sum(entry.kind is EntryKind.FILE for entry in self.entries)

    @property
    def size(self) -> int:
        """The bytes of its files, in all."""
        return sum(entry.size for entry in self.entries)

    def canonical(self) -> bytes:
        """The bytes whose digest is the version's id (sorted keys, no spaces)."""
        document = self.model_dump(mode="json")
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    def version_id(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()


class WorkspaceVersion(Frozen):
    """A version as results and commits refer to it: its id (the manifest's digest), the
    manifest's blob, the version it was made from, and its size."""

    id: Digest
    manifest: BlobRef
    #: the version the writing call started from (None: the empty workspace)
    base: Digest | None = None
    files: int = Field(default=0, ge=0)
    #: the bytes of its files, in all
    size: int = Field(default=0, ge=0)


class WorkspaceMount(Frozen):
    """A call's mount, frozen in its intent: how, where, and from which version (None:
    the empty workspace). A replay of the call starts from the same version."""

    mode: WorkspaceMode
    path: str = DEFAULT_MOUNT
    base: WorkspaceVersion | None = None
    limits: WorkspaceLimits = WorkspaceLimits()


class Artifact(Frozen):
    """A named, immutable output of an operation (a report, a patch, a tarball)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    blob: BlobRef
    media_type: str = "application/octet-stream"


class AppliedVersion(Frozen):
    """A version a session applied: the commit (``seq``, ``commit_id``) that made it the
    head, and the operations whose results that commit applied (the one that produced it,
    when the commit says so). An entry of the session's versions index."""

    v: Literal[1] = 1
    type: Literal["applied_version"] = "applied_version"
    #: the session whose log holds the commit (a fork lists its origin's versions too)
    session_id: str
    seq: int = Field(ge=1)
    commit_id: str
    version: WorkspaceVersion
    operations: tuple[str, ...] = ()
    #: when the commit was made (its record's ``committed_at``: the writer's clock, shown
    #: to people, never compared)
    committed_at: AwareDatetime | None = None


#: the control-document member that holds a session's ``WorkspaceRetention``
RETENTION: Final = "retention"


class WorkspaceRetention(Frozen):
    """How many of its latest applied versions a session keeps (control document member
    ``retention``). Whatever this says, the versions its open calls mount or produced
    are kept too, and a fork keeps its own (``docs/workspaces.md``, "Retention")."""

    keep_versions: int = Field(default=10, ge=1, le=100_000)
