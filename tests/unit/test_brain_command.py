"""The Brain worker's command line: what a deployment gives in the environment reaches
the worker as if it were given as options (the service table's settings)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

import brain.__main__ as command


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The settings ``worker`` would serve with (its serving stopped before it starts)."""
    seen: dict[str, Any] = {}

    async def serve(settings: Any, *_: Any) -> None:
        seen["settings"] = settings

    monkeypatch.setattr(command, "_serve", serve)
    return seen


def _worker(env: dict[str, str], *args: str) -> None:
    base = {"BH_STORE_URL": "sqlite:///x.db", "BH_REDIS_URL": "redis://127.0.0.1:1/0"}
    result = CliRunner().invoke(command.app, ["worker", *args], env=base | env)
    assert result.exit_code == 0, result.output


def test_plugins_and_sandboxed_tools_come_from_the_environment(served: dict[str, Any]) -> None:
    env = {
        "BH_BRAIN_PLUGINS": "greeter.tasks:plugin  examples.fetch.tasks:plugin",
        "BH_BRAIN_SANDBOXED": "letter_count http_get",
    }
    _worker(env)
    assert served["settings"].plugins == ("greeter.tasks:plugin", "examples.fetch.tasks:plugin")
    assert served["settings"].sandboxed == ("letter_count", "http_get")


def test_empty_variables_load_nothing(served: dict[str, Any]) -> None:
    _worker({"BH_BRAIN_PLUGINS": "", "BH_BRAIN_SANDBOXED": ""})
    assert served["settings"].plugins == ()
    assert served["settings"].sandboxed == ()


def test_options_win_over_the_environment(served: dict[str, Any]) -> None:
    _worker({"BH_BRAIN_PLUGINS": "a.b:c"}, "--plugin", "d.e:f")
    assert served["settings"].plugins == ("d.e:f",)
