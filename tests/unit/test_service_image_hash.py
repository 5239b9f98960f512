"""The service image's build hash covers what its wheel is made of: setuptools'
``include`` less its ``exclude`` (``examples/own-agent`` is a project of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bh import service_image
from bh.service_image import service_hash

PYPROJECT = """\
[tool.setuptools.packages.find]
include = ["brain*", "examples*"]
exclude = ["examples.own-agent*"]
"""


def _checkout(root: Path) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "README.md").write_text("readme")
    for path in ("brain/a.py", "examples/b.py", "examples/own-agent/greeter/c.py"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x = 1\n")
    return root


def test_an_excluded_project_does_not_change_the_hash_an_included_file_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = _checkout(tmp_path)
    (checkout / "recipe").mkdir()
    (checkout / "recipe" / "Dockerfile").write_text("FROM base\n")
    monkeypatch.setattr(service_image, "RECIPE", checkout / "recipe")
    before = service_hash("sha256:base", checkout)
    (checkout / "examples/own-agent/greeter/c.py").write_text("x = 2\n")
    assert service_hash("sha256:base", checkout) == before
    (checkout / "examples/b.py").write_text("x = 2\n")
    assert service_hash("sha256:base", checkout) != before
