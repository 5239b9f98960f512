"""edit_file: write, edit or delete one file of the workspace.

``path`` is relative to the workspace and stays inside it: an absolute path, ``..`` or a
link on the way that leads out is refused. ``content`` writes the whole file (its
directories made as needed); ``old`` and ``new`` replace the one occurrence of ``old``
(none or several: refused, the file unchanged); ``delete`` removes the file. A refusal
exits 1 with ``{"error"}``. Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


class Refused(Exception):
    pass


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
        workspace = os.environ.get("BH_WORKSPACE")
        if not workspace or not os.path.isdir(workspace):
            raise Refused("no workspace is mounted (BH_WORKSPACE)")
        if not isinstance(args, dict) or not isinstance(args.get("path"), str):
            raise Refused("'path' must be a string")
        return _emit(_change(workspace, args), 0)
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    except (Refused, OSError) as error:
        return _emit({"error": str(error)}, 1)


def _change(workspace: str, args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    where = _inside(workspace, path)
    if args.get("delete") is True:
        os.unlink(where)
        return {"path": path, "deleted": True}
    if "content" in args:
        text = args["content"]
    else:
        text = _replaced(where, path, args.get("old"), args.get("new"))
    created = not os.path.lexists(where)
    os.makedirs(os.path.dirname(where), exist_ok=True)
    _inside(workspace, path)  # the directories made: still inside
    data = str(text).encode()
    with open(where, "wb") as file:
        file.write(data)
    return {"path": path, "bytes": len(data), "created": created}


def _replaced(where: str, path: str, old: Any, new: Any) -> str:
    if not isinstance(old, str) or not old or not isinstance(new, str):
        raise Refused("give 'content', or 'old' (non-empty) and 'new', or 'delete'")
    with open(where, encoding="utf-8") as file:
        text = file.read()
    found = text.count(old)
    if found != 1:
        raise Refused(f"{path}: 'old' occurs {found} times; it must occur exactly once")
    return text.replace(old, new)


def _inside(workspace: str, path: str) -> str:
    """The file's place, refused unless it (links resolved) is inside the workspace."""
    if path.startswith("/") or "\x00" in path or ".." in path.split("/"):
        raise Refused(f"{path[:80]!r}: a path relative to the workspace, without '..'")
    root = os.path.realpath(workspace)
    where = os.path.join(root, path)
    if os.path.commonpath([root, os.path.realpath(where)]) != root:
        raise Refused(f"{path[:80]!r} leads out of the workspace")
    return where


def _emit(document: Any, status: int) -> int:
    text = json.dumps(document, ensure_ascii=False)
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace") + b"\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
