"""References to content-addressed blobs (large payloads kept out of commit records)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from contracts.model import Frozen

Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class BlobRef(Frozen):
    """A blob by its SHA-256 digest; the same bytes always give the same reference.

    The store keeps a blob in pieces of ``chunk_bytes``; knowing it, a reader fetches all
    pieces at once without listing them.
    """

    digest: Digest
    size: int = Field(ge=0)
    media_type: str = "application/octet-stream"
    chunk_bytes: int = Field(ge=1)

    @property
    def chunks(self) -> int:
        return max(1, -(-self.size // self.chunk_bytes))
