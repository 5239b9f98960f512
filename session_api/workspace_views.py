"""The Session API's wire models for reading workspaces and artifacts (pure data).

Shared by the server (``session_api.workspace``, ``session_api.artifacts``) and its
client (``bh.session_client``). A version is shown by its id, its base, and how many
files and bytes it holds — never by the blob its manifest is kept in (the store's
business). Paths are workspace paths (``contracts.workspace.normal_path``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final

from pydantic import Field

from contracts.model import Frozen
from contracts.workspace import EntryKind, ManifestEntry, WorkspaceVersion

#: The header that says what a path of ``GET …/workspace/files/{path}`` is.
ENTRY_HEADER: Final = "X-Workspace-Entry"
#: The header that gives a file's permission bits (octal) in that answer.
MODE_HEADER: Final = "X-Workspace-Mode"
#: The headers that say which version (and as of which commit) a file or tarball is of.
VERSION_HEADER: Final = "X-Workspace-Version"
SEQ_HEADER: Final = "X-Workspace-Seq"
#: What an artifact's name may be (``contracts.workspace.Artifact.name``).
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class VersionView(Frozen):
    """A workspace version: its id (the manifest's digest), the version it was made
    from (None: the empty workspace), its files and their bytes in all."""

    id: str
    base: str | None = None
    files: int
    size: int

    @classmethod
    def of(cls, version: WorkspaceVersion) -> VersionView:
        return cls(id=version.id, base=version.base, files=version.files, size=version.size)


class WorkspaceView(Frozen):
    """The session's workspace as of commit ``seq``: its head version and the manifest's
    entries in path order."""

    session_id: str
    seq: int
    version: VersionView
    entries: list[ManifestEntry]


class PathView(Frozen):
    """One path of a version: a directory with its ``entries`` (the paths right below
    it), or a link with its ``target`` (never followed). A file's answer is its bytes."""

    session_id: str
    seq: int
    version: str
    path: str
    kind: EntryKind
    mode: int | None = None
    size: int = 0
    digest: str | None = None
    target: str | None = None
    entries: list[ManifestEntry] = Field(default_factory=list)


class AppliedVersion(Frozen):
    """A version the session applied: the commit ``seq`` that made it the head, the
    operation whose result produced it (None: the head a fork started from, made in
    ``inherited_from``), and when."""

    seq: int
    operation_id: str | None = None
    committed_at: datetime | None = None
    version: VersionView
    inherited_from: str | None = None


class VersionList(Frozen):
    """Every version the session applied, oldest first."""

    session_id: str
    versions: list[AppliedVersion]


class Change(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


class PathChange(Frozen):
    """How one path differs between two versions. ``diff`` is a unified diff when both
    sides are text within the bounds; otherwise ``note`` says why there is none."""

    path: str
    change: Change
    before: ManifestEntry | None = None
    after: ManifestEntry | None = None
    diff: str | None = None
    note: str | None = None


class DiffView(Frozen):
    """What changed from the head as of commit ``from_seq`` to the head as of
    ``to_seq`` (a version of None is the empty workspace), in path order."""

    session_id: str
    from_seq: int
    to_seq: int
    from_version: str | None = None
    to_version: str | None = None
    changes: list[PathChange]


class ArtifactView(Frozen):
    """An artifact of one of the session's operations (download it from
    ``…/artifacts/{operation_id}/{name}``)."""

    operation_id: str
    tool: str
    name: str
    size: int
    media_type: str
    digest: str
    finished_at: datetime


class ArtifactList(Frozen):
    """The artifacts of the session's operations, oldest operation first."""

    session_id: str
    artifacts: list[ArtifactView]
