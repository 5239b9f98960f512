"""References to content-addressed blobs (large payloads kept out of commit records)."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from contracts.model import Frozen

Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class BlobRef(Frozen):
    """A blob by its SHA-256 digest; the same bytes always give the same reference."""

    digest: Digest
    size: int
    media_type: str = "application/octet-stream"
