"""Base classes shared by every contract model."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Final, TypeVar, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, ValidationError
from pydantic_core import PydanticUndefined

from contracts.errors import InvalidInput

_ID_CHARACTERS: Final = r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}"
#: What an identifier may be: 1-200 of these characters, starting with a letter or digit.
IDENTIFIER_PATTERN: Final = f"^{_ID_CHARACTERS}$"
#: The rule in words, for messages.
IDENTIFIER_RULE: Final = "1-200 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit"

# Identifiers end up inside object keys and item keys of every backend, so they are
# restricted to characters that need no escaping anywhere.
Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]
#: The ids every door checks (the bus's messages, the APIs' paths, wake jobs, the
#: store's keys): each an ``Identifier``, named for what it identifies.
SessionId = Identifier
OperationId = Identifier
TaskId = Identifier

_IDENTIFIER: Final = re.compile(_ID_CHARACTERS)
#: how much of an offending value a message or a log line shows
EXCERPT_CHARS: Final = 60


def excerpt(value: object) -> str:
    """``repr(value)`` cut to ``EXCERPT_CHARS`` (with its length when cut): what a
    message or a log line shows of input that may be 10 kB of anything."""
    text = repr(value)
    if len(text) <= EXCERPT_CHARS:
        return text
    size = len(value) if isinstance(value, (str, bytes)) else len(text)
    return f"{text[:EXCERPT_CHARS]}... ({size:,} characters)"


def check_id(value: object, what: str) -> str:
    """``value`` when it is an identifier; else ``InvalidInput`` naming ``what`` (e.g.
    "session id"), the rule and a short excerpt of the value."""
    if isinstance(value, str) and _IDENTIFIER.fullmatch(value):
        return value
    shown = excerpt(value)
    raise InvalidInput(f"{what} {shown} is not allowed: use {IDENTIFIER_RULE}", value=shown)


#: the fields of the wire models that hold ids
_ID_FIELDS: Final = frozenset({"operation_id", "session_id", "task_id"})


def refusal_of(error: ValidationError) -> tuple[str, str]:
    """Why a message failed to validate, as (reason, detail): ``invalid_id`` when an id
    field is what is wrong, else ``malformed`` (not JSON, another shape); the detail names
    the field and shows a short excerpt of the value, never the whole of it."""
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "(message)"
    reason = "invalid_id" if where in _ID_FIELDS and problem["type"] != "missing" else "malformed"
    return reason, f"{where}: {problem['msg'][:80]} (got {excerpt(problem.get('input'))})"


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
