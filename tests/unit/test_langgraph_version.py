"""The LangGraph adapter says, in one line, when the framework is not at its pin."""

from __future__ import annotations

import logging

import pytest

from adapters.langgraph.version import PINS, check_versions


def test_the_pins_match_the_extra_in_pyproject() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    for name, pin in PINS.items():
        assert f'"{name}=={pin}"' in text, name


def test_matching_versions_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    assert check_versions(PINS.__getitem__) is None
    assert not caplog.records


def test_a_different_version_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    found = {**PINS, "langgraph": "1.3.0"}
    with caplog.at_level(logging.WARNING, logger="adapters.langgraph"):
        line = check_versions(found.__getitem__)
    assert line is not None and "langgraph 1.3.0 (pinned 1.2.24)" in line
    assert "\n" not in line and [r.getMessage() for r in caplog.records] == [line]
