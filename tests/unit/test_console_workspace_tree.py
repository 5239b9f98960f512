"""The console draws a version's manifest as a tree: each path under its directory (a
directory the manifest only implies is drawn too), and a diff's lines by kind."""

from __future__ import annotations

from contracts.workspace import EntryKind, ManifestEntry
from session_api.console.workspace import DEEPEST, diff_lines, tree_rows, workspace_url
from session_api.workspace_diff import unified
from session_api.workspace_views import Change, PathChange

DIGEST = "0" * 64


def _file(path: str) -> ManifestEntry:
    return ManifestEntry(path=path, kind=EntryKind.FILE, digest=DIGEST, size=1)


def test_a_directorys_paths_follow_it_and_implied_directories_are_drawn() -> None:
    # in a manifest's order "pkg.txt" sorts between "pkg" and "pkg/a.py" ("." < "/")
    entries = (_file("pkg.txt"), _file("pkg/a.py"), _file("pkg/sub/b.py"), _file("z.py"))
    rows = tree_rows("s1", 3, entries)
    assert [(row.entry.path, row.depth) for row in rows] == [
        ("pkg", 0),
        ("pkg/a.py", 1),
        ("pkg/sub", 1),
        ("pkg/sub/b.py", 2),
        ("pkg.txt", 0),
        ("z.py", 0),
    ]
    assert rows[0].entry.kind is EntryKind.DIR and rows[3].name == "b.py"
    assert rows[3].href == "/console/sessions/s1/workspace?at=3&path=pkg/sub/b.py"


def test_a_deep_path_is_drawn_at_the_deepest_indentation() -> None:
    deep = "/".join(f"d{n}" for n in range(30)) + "/f"
    rows = tree_rows("s1", 1, (_file(deep),))
    assert len(rows) == 31 and max(row.depth for row in rows) == DEEPEST


def test_an_odd_path_is_quoted_in_its_link() -> None:
    assert (
        workspace_url("s 1", 2, "a b/#c?")
        == "/console/sessions/s%201/workspace?at=2&path=a%20b/%23c%3F"
    )


def test_a_diffs_lines_are_classed_by_kind() -> None:
    text = unified("a.py", "x\ny\n", "x\nz\n")
    change = PathChange(path="a.py", change=Change.CHANGED, diff=text)
    kinds = [(line.kind, line.text) for line in diff_lines(change)]
    assert kinds == [
        ("meta", "--- a/a.py"),
        ("meta", "+++ b/a.py"),
        ("hunk", "@@ -1,2 +1,2 @@"),
        ("", " x"),
        ("del", "-y"),
        ("add", "+z"),
    ]
