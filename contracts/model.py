"""Base classes shared by every contract model."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

# Identifiers end up inside object keys and item keys of every backend, so they are
# restricted to characters that need no escaping anywhere.
Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$")]

# A client's idempotency key. Shorter than an identifier, because the kernel derives
# ids from it (the root task ``root.<request_id>``, the user entry ``in.<request_id>``).
RequestId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]

# A task kind's name, e.g. ``send-batch``.
KindName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]


def _require_aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamps must carry a timezone (use UTC)")
    return value


AwareDatetime = Annotated[datetime, AfterValidator(_require_aware)]


def utcnow() -> datetime:
    """Wall-clock time of *this* host: informational, never used for ordering."""
    return datetime.now(UTC)


class Frozen(BaseModel):
    """Immutable, strict-shaped record: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")
