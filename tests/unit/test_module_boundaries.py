"""The boundaries the design draws between modules, read from every file's imports:
``contracts`` imports nothing else of the project, and the store's layout and codec are
private to ``session_store`` — everyone else reads a log through ``store.commits`` /
``store.history`` (typed, checked, paged), so no reader depends on how records are laid
out in a backend. The store's own tests (``test_store_*``) may reach under it.
``adapters`` is the top floor: it may import ``brain``, ``session_store`` and
``contracts`` (and the frameworks of its optional extras); nothing else of the project
imports it, and no other package imports a framework, so brainhands without an extra
never loads one."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    path.parent.name
    for path in ROOT.glob("*/__init__.py")
    if path.parent.name not in {"tests", "bench", "scripts"}
)
PRIVATE = {"session_store.layout", "session_store.codec"}
#: what the adapters floor may import of the project
ADAPTERS_USE = {"adapters", "brain", "session_store", "contracts"}
#: the frameworks only ``adapters`` may import (their extras are optional)
FRAMEWORKS = {"langgraph", "langchain_core", "langsmith"}


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Each module a file imports, with ``from package import module`` spelled out."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def sources() -> list[Path]:
    found = [
        path
        for top in [*PACKAGES, "tests", "bench", "scripts"]
        for path in (ROOT / top).rglob("*.py")
    ]
    assert len(found) > 200, found  # the walk found the project, not an empty tree
    return found


def test_contracts_imports_nothing_else_of_the_project() -> None:
    assert "contracts" in PACKAGES and "session_store" in PACKAGES, PACKAGES
    others = set(PACKAGES) - {"contracts"}
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in (ROOT / "contracts").rglob("*.py")
        for line, name in imports(path)
        if name.split(".")[0] in others
    ]
    assert not found, found


def test_the_store_layout_and_codec_are_private_to_the_store() -> None:
    def allowed(path: Path) -> bool:
        inside = path.relative_to(ROOT).parts[0] == "session_store"
        return inside or path.name.startswith("test_store_")

    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources()
        if not allowed(path)
        for line, name in imports(path)
        if name in PRIVATE
    ]
    assert not found, found


def test_the_boundary_check_sees_a_private_import(tmp_path: Path) -> None:
    """The check itself can fail: both spellings of a private import are seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("from session_store import layout\nimport session_store.codec as c\n")
    assert {name for _, name in imports(probe)} & PRIVATE == PRIVATE


def test_adapters_import_only_the_floors_below_them() -> None:
    assert "adapters" in PACKAGES, PACKAGES
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in (ROOT / "adapters").rglob("*.py")
        for line, name in imports(path)
        if name.split(".")[0] in set(PACKAGES) - ADAPTERS_USE
    ]
    assert not found, found


def test_nothing_but_tests_and_benchmarks_imports_adapters_or_a_framework() -> None:
    def allowed(path: Path) -> bool:
        return path.relative_to(ROOT).parts[0] in {"adapters", "tests", "bench"}

    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources()
        if not allowed(path)
        for line, name in imports(path)
        if name.split(".")[0] in {"adapters", *FRAMEWORKS}
    ]
    assert not found, found


def test_importing_every_other_module_loads_no_framework() -> None:
    """Not even through a third-party library: every module of every package but
    ``adapters`` imported in a fresh interpreter leaves the frameworks unloaded."""
    tops = [top for top in PACKAGES if top != "adapters"]
    probe = (
        "import importlib, pkgutil, sys\n"
        f"for top in {tops!r}:\n"
        "    package = importlib.import_module(top)\n"
        "    for info in pkgutil.walk_packages(package.__path__, top + '.'):\n"
        "        if not info.name.endswith('__main__'):\n"
        "            importlib.import_module(info.name)\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FRAMEWORKS)!r})\n"
        "print(len(sys.modules), loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    count, loaded = done.stdout.split(" ", 1)
    assert int(count) > 500, done.stdout  # the walk imported the project
    assert loaded.strip() == "[]", loaded


def test_the_framework_check_sees_an_adapter_import() -> None:
    """The check itself can fail: importing the adapter loads its framework."""
    probe = "import sys, adapters.langgraph; print('langgraph' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "True", done.stdout
