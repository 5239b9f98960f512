"""Baselines: materialised session state at a seq, so loads need not replay all history."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from contracts.blob import BlobRef
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow

BASELINE_RECORD_VERSION: Final = 1


class EntrySegment(Frozen):
    """Entries ``first`` .. ``first + count - 1`` of a session, archived in one blob."""

    blob: BlobRef
    first: int = Field(ge=0)
    count: int = Field(ge=1)


class BaselineRecord(Frozen):
    """Points at the state blob materialised after commit ``seq``."""

    v: Literal[1] = BASELINE_RECORD_VERSION
    type: Literal["baseline"] = "baseline"
    session_id: Identifier
    seq: int = Field(ge=1)
    state: BlobRef
    written_at: AwareDatetime = Field(default_factory=utcnow)
