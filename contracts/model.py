"""Base classes shared by every contract model."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints
from pydantic_core import PydanticUndefined

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


FrozenT = TypeVar("FrozenT", bound="Frozen")


class Frozen(BaseModel):
    """Immutable, strict-shaped record: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def trusted(cls: type[FrozenT], **values: Any) -> FrozenT:
        """The record of ``values`` already validated (parts built as records), as
        ``model_construct`` makes it, without its lookup of every field's default on
        each call (a commit record: 6.8 µs that way, 2.3 µs this way).
        Fields left out take their constant defaults; a class whose construction does
        more (default factories left out, private attributes, a post-init hook) goes
        through ``model_construct``."""
        plan = _PLANS[cls] if cls in _PLANS else _PLANS.setdefault(cls, _plan(cls))
        if plan is None:
            return cast(FrozenT, cls.model_construct(**values))
        template, required = plan
        # the template's order is the fields' order, as stored records are written
        # (``v`` first); a value given replaces its placeholder in place
        data = {**template, **values}
        if len(data) != len(template) or not required <= values.keys():
            return cast(FrozenT, cls.model_construct(**values))  # unknown, or left out
        record = cls.__new__(cls)
        object.__setattr__(record, "__dict__", data)
        object.__setattr__(record, "__pydantic_fields_set__", set(values))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record


#: per class: every field in order with its constant default (or a placeholder), and
#: the fields a caller must give (no default, or a default factory); None: construct
_PLANS: dict[type[BaseModel], tuple[dict[str, Any], frozenset[str]] | None] = {}


def _plan(cls: type[BaseModel]) -> tuple[dict[str, Any], frozenset[str]] | None:
    if cls.__private_attributes__ or cls.__pydantic_post_init__:
        return None
    template: dict[str, Any] = {}
    required: set[str] = set()
    for name, field in cls.model_fields.items():
        constant = field.default is not PydanticUndefined and field.default_factory is None
        template[name] = field.default if constant else None
        if not constant:
            required.add(name)
    return template, frozenset(required)
