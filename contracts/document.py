"""Documents: typed, versioned structured state changed only inside commits."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue

from contracts.model import AwareDatetime, Frozen, Identifier, utcnow

#: The one document writers without a lease may change (by merge patch): clients record
#: requests there, such as cancellations, and the lease holder turns them into decisions.
CONTROL_DOCUMENT = "control"

#: Previews of running tasks (text a model is streaming), one member per task, written
#: by deferred commits of the lease holder: they may be lost and drive nothing.
PROGRESS_DOCUMENT = "progress"


class Document(Frozen):
    """Current value of a named document; ``version`` counts its changes from 1."""

    name: Identifier
    kind: str = "json"
    version: int = Field(ge=1)
    body: dict[str, Any]
    updated_at: AwareDatetime = Field(default_factory=utcnow)


class DocumentPut(Frozen):
    """Create or replace a document.

    ``expected_version`` guards against lost updates: 0 means "must not exist yet",
    ``None`` means "whatever is there".
    """

    op: Literal["put"] = "put"
    name: Identifier
    kind: str = "json"
    body: dict[str, Any]
    expected_version: int | None = None


class DocumentPatch(Frozen):
    """Change part of a document with an RFC 7396 JSON merge patch.

    A missing document is an error, unless ``create`` is set: then the patch applies to
    an empty object. Patches commute with concurrent writers of other members, which is
    what lets unfenced writers (e.g. a cancel request) and the lease holder share one
    document.
    """

    op: Literal["patch"] = "patch"
    name: Identifier
    kind: str = "json"
    patch: dict[str, JsonValue]
    create: bool = False
    expected_version: int | None = None


DocumentWrite = DocumentPut | DocumentPatch
