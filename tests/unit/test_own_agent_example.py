"""The own-agent example (``examples/own-agent``, issue 36): a project of its own whose
plugin the Brain loads by name, and whose ``letter_count`` image declares itself in
labels.

A ``greet`` session runs on the embedded store; ``letter_count`` runs on the process
sandbox as the example's own ``tool.py``, under the definition its Dockerfile's labels
declare (read here without Docker; tests/integration/test_own_agent_image.py builds
and runs the image)."""

from __future__ import annotations

import shlex
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import read_configuration  # type: ignore[import-untyped]

from bh.declared_tools import read_declared
from brain.operations import operation_id
from contracts import TaskStatus
from contracts.tool import ToolDefinition
from hands.labels import definition_from_labels
from hands.sandbox.process import ProcessSandbox
from tests.support.kernel import Kernel, kernel
from tests.support.own_agent import EXAMPLE, IMAGE, TASK, greet, greeted, load_greeter, ran_once
from tests.support.processes import ROOT


def dockerfile_labels(dockerfile: Path) -> dict[str, str]:
    """The ``LABEL`` key=value pairs of a Dockerfile (continuation lines joined)."""
    labels: dict[str, str] = {}
    for line in dockerfile.read_text().replace("\\\n", " ").splitlines():
        if line.startswith("LABEL "):
            for pair in shlex.split(line.removeprefix("LABEL ")):
                key, _, value = pair.partition("=")
                labels[key] = value
    return labels


def letter_count() -> ToolDefinition:
    """What registering the image records, with the process sandbox running ``tool.py``
    on this host instead of in the image."""
    labels = dockerfile_labels(EXAMPLE / "tool" / "Dockerfile")
    declared = definition_from_labels(IMAGE, "sha256:letter-count", labels)
    here = (sys.executable, str(EXAMPLE / "tool" / "tool.py"))
    return declared.model_copy(update={"command": here})


@pytest.fixture
async def k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Kernel]:
    async with kernel(tmp_path) as made, AsyncExitStack() as resources:
        await load_greeter(made, monkeypatch, resources, letter_count())
        yield made


async def test_greet_shouts_in_the_brain_then_counts_on_the_hands_each_once(
    k: Kernel, tmp_path: Path
) -> None:
    done = await greet(k, ProcessSandbox(tmp_path / "runs"), "Ada")
    assert done.result == greeted("Ada")
    await ran_once(k, "shout", "count")


@pytest.mark.parametrize("given", [{"name": 3}, {"name": ""}, {}, "Ada", None])
async def test_bad_input_fails_as_invalid_input_before_any_tool_runs(
    k: Kernel, given: object
) -> None:
    await k.submit_task("greet", given)
    await k.run()
    failed = await k.task(TASK)
    assert failed.status is TaskStatus.TERMINAL and failed.error is not None, failed
    assert failed.error.code == "invalid_input"
    assert await k.store.get_operation(operation_id("s1", TASK, "shout")) is None
    assert (await k.store.session("s1")).state.intents == {}


def test_the_image_declares_a_replay_safe_tool_without_network() -> None:
    declared = letter_count()
    assert (declared.name, declared.version, declared.replay.value) == ("letter_count", 1, "safe")
    assert declared.network.is_none and declared.parameters["required"] == ["name"]


def test_the_tools_file_declares_the_image_the_readme_builds() -> None:
    [entry] = read_declared(EXAMPLE / "tools.json")
    assert entry.image == IMAGE and not entry.allow
    readme = (EXAMPLE / "README.md").read_text()
    assert f"docker build -t {IMAGE} examples/own-agent/tool" in readme


def test_brainhands_packages_leave_the_example_project_out() -> None:
    """The example is a project of its own: brainhands' wheel (and so the service image)
    must not carry it as ``examples.own-agent``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools: [tool.setuptools] support is "beta"
        configuration = read_configuration(ROOT / "pyproject.toml", expand=True)
    packages = configuration["tool"]["setuptools"]["packages"]
    assert "examples.fetch" in packages
    assert [p for p in packages if "own-agent" in p or "greeter" in p] == []
