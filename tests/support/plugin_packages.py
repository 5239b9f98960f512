"""A tiny Python project of a user's own (a ``pyproject.toml`` and one module with a
``plugin`` function), made in a test's directory for ``bh images build --plugin``."""

from __future__ import annotations

from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
"""


def tiny_package(root: Path, module: str = "tinyplug", says: str = "hi") -> Path:
    """``root`` made a project whose module ``module`` has ``plugin()`` returning ``says``."""
    (root / module).mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(name=module))
    (root / module / "__init__.py").write_text(f"def plugin() -> str:\n    return {says!r}\n")
    return root
