"""Reading a tool image's labels into a ``ToolDefinition`` (the image contract).

Every problem is refused with the label it concerns, what was found and what is
allowed. The operator, not the image, grants network destinations and non-secret
config at registration; the image's ``network`` label only says what it was built for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jsonschema
from pydantic import ValidationError

from contracts import InvalidInput, ReplayPolicy
from contracts.tool import LABEL_PREFIX, Limits, NetworkPolicy, ToolDefinition

_T = TypeVar("_T")
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([kmg]?)b?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def definition_from_labels(
    image: str,
    image_id: str,
    labels: Mapping[str, str],
    *,
    allow: Sequence[str] = (),
    config: Mapping[str, str] | None = None,
    registered_by: str = "",
) -> ToolDefinition:
    """The definition an image declares; ``allow`` replaces its network policy."""
    try:
        allowed = NetworkPolicy(allow=tuple(allow))
    except ValidationError:
        raise InvalidInput(
            f"network allowance {list(allow)} is invalid: each is host:port", allow=list(allow)
        ) from None
    label = _Labels(labels)
    parameters = label.parse("schema", _schema)
    declared = label.optional("network", _network) or NetworkPolicy()
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
        "network": allowed if allow else declared,
        "command": label.optional("command", _argv),
        "query": label.optional("query", _argv),
        "config": dict(config or {}),
        "image": image,
        "image_id": image_id,
        "registered_by": registered_by,
    }
    try:
        return ToolDefinition(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][-1]) if first["loc"][:1] == ("limits",) else str(first["loc"][0])
        name = LABEL_PREFIX + _LABEL_OF.get(field, field)
        raise InvalidInput(
            f"image {image}: label {name} is invalid: {first['msg']}", label=name
        ) from None


_LABEL_OF = {
    "timeout_s": "timeout",
    "parameters": "schema",
    "memory_bytes": "memory",
    "scratch_bytes": "scratch",
    "output_bytes": "output-limit",
}


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
    return schema


def _size(text: str) -> int:
    match = _SIZE.match(text)
    if match is None:
        raise ValueError("a size is a number with an optional k, m or g suffix, e.g. 128m")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _network(text: str) -> NetworkPolicy:
    if text == "none":
        return NetworkPolicy()
    return NetworkPolicy(allow=tuple(part.strip() for part in text.split(",") if part.strip()))


def _argv(text: str) -> tuple[str, ...]:
    argv = json.loads(text)
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("a command is a non-empty JSON array of strings")
    return tuple(argv)
