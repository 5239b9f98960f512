"""What an image's labels declare is bounded by the operator (issue 13, defect 17): a
limit past the Hands' cap, or a schema pattern that can backtrack for seconds, is
refused at registration with the label, what was declared and what is allowed."""

from __future__ import annotations

import json

import pytest

from contracts import InvalidInput
from hands.labels import ToolCaps, definition_from_labels

P = "io.brainhands.tool."
BASE = {
    P + "name": "greedy",
    P + "version": "1",
    P + "schema": '{"type":"object"}',
    P + "replay": "safe",
    P + "timeout": "10",
}


def register(caps: ToolCaps | None = None, **labels: str) -> object:
    declared = {**BASE, **{P + k.replace("_", "-"): v for k, v in labels.items()}}
    return definition_from_labels("img", "sha256:0", declared, caps=caps or ToolCaps())


@pytest.mark.parametrize(
    ("label", "value", "allowed"),
    [
        ("memory", "64g", "4g"),
        ("scratch", "64g", "1g"),
        ("output_limit", "8g", "16m"),
        ("cpus", "64", "4"),
        ("pids", "4096", "1024"),
        ("timeout", "86400", "3600"),
    ],
)
def test_a_limit_past_the_operators_cap_is_refused_naming_both(
    label: str, value: str, allowed: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        register(**{label: value})
    name = P + label.replace("_", "-")
    assert refused.value.details["label"] == name
    assert name in refused.value.message and "at most" in refused.value.message


def test_caps_are_the_operators_to_raise() -> None:
    definition = register(ToolCaps(memory_bytes=64 * 2**30), memory="64g")
    assert definition.limits.memory_bytes == 64 * 2**30  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "pattern", ["^(a+)+$", "(a*)*b", "^(\\w+\\s?)*$", "(x+x+)+y", "((ab)*)+", "(a|a?)+{0,}"]
)
def test_a_pattern_with_nested_repetition_is_refused(pattern: str) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    with pytest.raises(InvalidInput, match="pattern"):
        register(schema=json.dumps(schema))


def test_pattern_properties_are_checked_too() -> None:
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "string"}}}
    with pytest.raises(InvalidInput, match="pattern"):
        register(schema=json.dumps(schema))


@pytest.mark.parametrize("pattern", ["^[a-z0-9_-]{1,64}$", "^\\d+(\\.\\d+)?$", "^(ab|cd)+$"])
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    register(schema=json.dumps(schema))
