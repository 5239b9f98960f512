"""write_files: write whole files into the session's workspace; publish the change as a patch.

Arguments: ``files`` (workspace path → the file's full new text) and optionally ``patch``
(the artifact's name, default ``change.patch``). Each path must be relative and stay
inside the workspace (``$BH_WORKSPACE``): no ``..``, no NUL, and no symbolic link on the
way (a link is never written through). Missing directories are created. The unified diff
of the change (``difflib``) is the output's ``diff`` and the artifact. Writing the same
files again from the same base writes the same bytes, so a replay is harmless. Stdlib
only; see docs/tools.md and docs/workspaces.md.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

DIFF_CAP = 256 * 1024


class Refused(Exception):
    """A path this tool will not write."""


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    root, artifacts = os.environ.get("BH_WORKSPACE"), os.environ.get("BH_ARTIFACTS")
    if not root or not artifacts:
        return _emit({"error": "no workspace is mounted (BH_WORKSPACE, BH_ARTIFACTS)"}, 1)
    files = args.get("files") if isinstance(args, dict) else None
    if not isinstance(files, dict) or not files:
        return _emit({"error": "'files' must map workspace paths to text"}, 1)
    diffs: list[str] = []
    try:
        for path, text in sorted(files.items()):
            if not isinstance(text, str):
                raise Refused(f"{path}: the content must be text")
            diffs.append(_write(Path(root), path, text))
    except (Refused, OSError) as error:
        return _emit({"error": str(error)}, 1)
    diff = "".join(diffs)
    name = args.get("patch") or "change.patch"
    Path(artifacts, name).write_text(diff, encoding="utf-8")
    cut = len(diff) > DIFF_CAP
    return _emit({"written": sorted(files), "diff": diff[:DIFF_CAP], "truncated": cut}, 0)


def _write(root: Path, path: str, text: str) -> str:
    """Write ``text`` at ``path`` under ``root``; the unified diff of the change."""
    parts = path.split("/")
    if "\x00" in path or any(part in ("", ".", "..") for part in parts):
        raise Refused(f"{path[:200]!r} is not a relative path inside the workspace")
    directory = root
    for part in parts[:-1]:
        directory = directory / part
        try:
            mode = directory.lstat().st_mode
        except FileNotFoundError:
            directory.mkdir(mode=0o755)
            continue
        if not stat.S_ISDIR(mode):
            raise Refused(f"{path}: {directory.relative_to(root)} is not a directory")
    target = directory / parts[-1]
    old = ""
    try:
        mode = target.lstat().st_mode
        if not stat.S_ISREG(mode):
            raise Refused(f"{path} exists and is not a regular file (never written through)")
        old = target.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        pass
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"a/{path}" if old else "/dev/null",
            tofile=f"b/{path}",
        )
    )


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
