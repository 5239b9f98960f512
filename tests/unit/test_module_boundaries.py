"""The boundaries the design draws between modules, read from every file's imports:
``contracts`` imports nothing else of the project, and the store's layout and codec are
private to ``session_store`` — everyone else reads a log through ``store.commits`` /
``store.history`` (typed, checked, paged), so no reader depends on how records are laid
out in a backend. The store's own tests (``test_store_*``) may reach under it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    path.parent.name
    for path in ROOT.glob("*/__init__.py")
    if path.parent.name not in {"tests", "bench", "scripts"}
)
PRIVATE = {"session_store.layout", "session_store.codec"}


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
