"""Reading a tool image's labels into a ``ToolDefinition`` (the image contract).

Every problem is refused with the label it concerns, what was found and what is
allowed. The operator, not the image, grants network destinations and non-secret
config at registration: the image's ``network`` label only says what it was built for
(``declared_network``, shown to the operator, never granted; a malformed one is still
refused), and without ``allow`` a tool has no network at all.
The operator also bounds what an image may declare (``ToolCaps``): a limit past its
cap, or an arguments schema whose patterns can backtrack without bound (a repetition
inside a repetition, e.g. ``^(a+)+$``: validating one argument could hold the event
loop for seconds), is refused, never clamped silently.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import jsonschema
from pydantic import Field, ValidationError

from contracts import InvalidInput, ReplayPolicy
from contracts.model import Frozen
from contracts.tool import LABEL_PREFIX, Limits, NetworkPolicy, ToolDefinition
from contracts.workspace import DEFAULT_MOUNT, WorkspaceAccess, WorkspaceMode
from hands.workspace.mount import mount_target

_T = TypeVar("_T")
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([kmg]?)b?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
#: Longest regular expression a schema may hold (``pattern``, ``patternProperties``).
MAX_PATTERN_LENGTH = 1000


class ToolCaps(Frozen):
    """The most an image may declare on this Hands (the operator's settings; defaults
    in ``docs/tools.md``). Registration refuses an image that declares more."""

    cpus: float = Field(default=4.0, gt=0)
    memory_bytes: int = Field(default=4 * 2**30, gt=0)
    pids: int = Field(default=1024, gt=0)
    scratch_bytes: int = Field(default=2**30, gt=0)
    output_bytes: int = Field(default=16 * 2**20, gt=0)
    timeout_s: float = Field(default=3600.0, gt=0)


def definition_from_labels(
    image: str,
    image_id: str,
    labels: Mapping[str, str],
    *,
    allow: Sequence[str] = (),
    config: Mapping[str, str] | None = None,
    registered_by: str = "",
    caps: ToolCaps | None = None,
) -> ToolDefinition:
    """The definition an image declares, granted exactly the destinations in ``allow``
    (none: no network, whatever the image's ``network`` label names); a limit past
    ``caps`` (default: ``ToolCaps()``) is refused."""
    try:
        allowed = NetworkPolicy(allow=tuple(allow))
    except ValidationError:
        raise InvalidInput(
            f"network allowance {list(allow)} is invalid: each is host:port", allow=list(allow)
        ) from None
    label = _Labels(labels)
    parameters = label.parse("schema", _schema)
    declared_network(labels)  # a malformed label is refused even though it grants nothing
    defaults = Limits()
    limits = {
        "cpus": label.optional("cpus", float) or defaults.cpus,
        "memory_bytes": label.optional("memory", _size) or defaults.memory_bytes,
        "pids": label.optional("pids", int) or defaults.pids,
        "scratch_bytes": label.optional("scratch", _size) or defaults.scratch_bytes,
        "output_bytes": label.optional("output-limit", _size) or defaults.output_bytes,
    }
    fields: dict[str, Any] = {
        "name": label.parse("name", str),
        "version": label.parse("version", int),
        "description": labels.get(LABEL_PREFIX + "description", ""),
        "parameters": parameters,
        "replay": label.parse("replay", ReplayPolicy),
        "timeout_s": label.parse("timeout", float),
        "limits": limits,
        "network": allowed,
        "command": label.optional("command", _argv),
        "query": label.optional("query", _argv),
        "approval": label.optional("approval", _approval),
        "workspace": label.optional("workspace", _workspace) or WorkspaceAccess(),
        "config": dict(config or {}),
        "image": image,
        "image_id": image_id,
        "registered_by": registered_by,
    }
    _within(image, {**limits, "timeout_s": fields["timeout_s"]}, caps or ToolCaps())
    try:
        return ToolDefinition(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][-1]) if first["loc"][:1] == ("limits",) else str(first["loc"][0])
        name = LABEL_PREFIX + _LABEL_OF.get(field, field)
        raise InvalidInput(
            f"image {image}: label {name} is invalid: {first['msg']}", label=name
        ) from None


def declared_network(labels: Mapping[str, str]) -> NetworkPolicy:
    """What the image's ``network`` label names (absent or ``none``: nothing): what it
    was built to reach, for showing the operator — a grant only through ``allow``."""
    return _Labels(labels).optional("network", _network) or NetworkPolicy()


def _within(image: str, declared: Mapping[str, float], caps: ToolCaps) -> None:
    for field, value in declared.items():
        cap = getattr(caps, field)
        if value > cap:
            name = LABEL_PREFIX + _LABEL_OF.get(field, field)
            raise InvalidInput(
                f"image {image}: label {name} declares {_shown(field, value)}; this Hands "
                f"allows at most {_shown(field, cap)} (the operator's cap "
                f"{_CAP_SETTING[field]}, docs/tools.md)",
                label=name,
                declared=value,
                cap=cap,
            )


def _shown(field: str, value: float) -> str:
    if field.endswith("_bytes"):
        for unit, size in (("g", 2**30), ("m", 2**20), ("k", 2**10)):
            if value >= size and value % size == 0:
                return f"{int(value // size)}{unit}"
        return f"{int(value)} bytes"
    return f"{value:g}{'s' if field == 'timeout_s' else ''}"


_CAP_SETTING = {
    "cpus": "BH_HANDS_MAX_CPUS",
    "memory_bytes": "BH_HANDS_MAX_MEMORY",
    "pids": "BH_HANDS_MAX_PIDS",
    "scratch_bytes": "BH_HANDS_MAX_SCRATCH",
    "output_bytes": "BH_HANDS_MAX_OUTPUT",
    "timeout_s": "BH_HANDS_MAX_TIMEOUT",
}
_LABEL_OF = {
    "timeout_s": "timeout",
    "parameters": "schema",
    "memory_bytes": "memory",
    "scratch_bytes": "scratch",
    "output_bytes": "output-limit",
}


def _approval(value: str) -> dict[str, Any]:
    """``required`` (every call, default rule) or a rule as JSON without its tool."""
    rule = {} if value == "required" else json.loads(value)
    if not isinstance(rule, dict):
        raise ValueError('approval must be "required" or a JSON object')
    return {**rule, "tool": "*"}


class _Labels:
    def __init__(self, labels: Mapping[str, str]) -> None:
        self._labels = labels

    def parse(self, name: str, parse: Callable[[str], _T]) -> _T:
        value = self._labels.get(LABEL_PREFIX + name)
        if value is None or not value.strip():
            raise InvalidInput(
                f"label {LABEL_PREFIX}{name} is missing; every tool image must declare it "
                "(see docs/tools.md)",
                label=LABEL_PREFIX + name,
            )
        try:
            return parse(value.strip())
        except (ValueError, TypeError, json.JSONDecodeError, jsonschema.SchemaError) as error:
            raise InvalidInput(
                f"label {LABEL_PREFIX}{name} is invalid ({value[:80]!r}): {error}",
                label=LABEL_PREFIX + name,
            ) from None

    def optional(self, name: str, parse: Callable[[str], _T]) -> _T | None:
        if not self._labels.get(LABEL_PREFIX + name, "").strip():
            return None
        return self.parse(name, parse)


def _schema(text: str) -> dict[str, Any]:
    schema = json.loads(text)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError('the arguments schema must be a JSON Schema with "type": "object"')
    jsonschema.Draft202012Validator.check_schema(schema)
    for pattern in _patterns(schema):
        _check_pattern(pattern)
    return schema


def _patterns(schema: Any) -> Iterator[str]:
    """Every regular expression in a schema: ``pattern`` values, ``patternProperties``
    keys, at any depth."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            if isinstance(node.get("patternProperties"), dict):
                yield from (str(key) for key in node["patternProperties"])
            pending.extend(node.values())


def _check_pattern(pattern: str) -> None:
    """Refuse a pattern that can backtrack without bound: a repetition inside a
    repetition (``(a+)+``, ``(\\w+\\s?)*``), where the number of ways to match grows
    exponentially with the input."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"a schema pattern is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        parsed = _sre_parse(pattern)
    except re.error as error:
        raise ValueError(f"schema pattern {pattern!r} is not a valid regex: {error}") from None
    if _nested_repeat(parsed, inside=False):
        raise ValueError(
            f"schema pattern {pattern!r} repeats a repetition (e.g. (a+)+): matching it can "
            "take exponential time, so it is refused; rewrite it without nesting "
            "quantifiers (e.g. ^a+$)"
        )


def _sre_parse(pattern: str) -> Any:
    """The stdlib's own parse of ``pattern`` (what ``re`` compiles; no stubs ship)."""
    parser = importlib.import_module("re._parser")
    return parser.parse(pattern)


_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _nested_repeat(items: Any, *, inside: bool) -> bool:
    for op, value in items:
        name = str(op)
        if name in _REPEATS:
            _low, high, body = value
            unbounded = high > 1
            if inside and unbounded:
                return True
            if _nested_repeat(body, inside=inside or unbounded):
                return True
        elif name == "SUBPATTERN":
            if _nested_repeat(value[-1], inside=inside):
                return True
        elif name == "BRANCH":
            if any(_nested_repeat(branch, inside=inside) for branch in value[1]):
                return True
        elif name in ("ASSERT", "ASSERT_NOT") and _nested_repeat(value[1], inside=inside):
            return True
    return False


def parse_size(text: str) -> int:
    """A size label's value in bytes (``64k``, ``128m``, ``1g``, or a plain number)."""
    return _size(text.strip())


def _size(text: str) -> int:
    match = _SIZE.match(text)
    if match is None:
        raise ValueError("a size is a number with an optional k, m or g suffix, e.g. 128m")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _network(text: str) -> NetworkPolicy:
    if text == "none":
        return NetworkPolicy()
    parts = tuple(part.strip() for part in text.split(",") if part.strip())
    try:
        return NetworkPolicy(allow=parts)
    except ValidationError as error:
        where = error.errors()[0]["loc"][-1]
        bad = parts[where] if isinstance(where, int) else text
        raise ValueError(
            f"{bad!r} is not host:port (e.g. mail.internal:8025, no wildcard); the label is "
            "`none` or host:port,…"
        ) from None


def _workspace(text: str) -> WorkspaceAccess:
    """``rw`` or ``ro``, optionally with where (``rw:/work``; default ``/workspace``), or
    ``none``."""
    mode, _, path = text.partition(":")
    try:
        access = WorkspaceMode(mode)
    except ValueError:
        raise ValueError(
            f"the mode {mode[:20]!r} is not one of rw, ro or none (e.g. rw or ro:/work)"
        ) from None
    if access is WorkspaceMode.NONE:
        if path:
            raise ValueError("none takes no path (a tool that mounts nothing)")
        return WorkspaceAccess()
    return WorkspaceAccess(mode=access, path=mount_target(path or DEFAULT_MOUNT))


def _argv(text: str) -> tuple[str, ...]:
    argv = json.loads(text)
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("a command is a non-empty JSON array of strings")
    return tuple(argv)
