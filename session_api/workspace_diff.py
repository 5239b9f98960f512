"""What changed between two workspace versions: each added, removed or changed path,
and for text files of bounded size a unified diff (as ``git diff`` prints one).

The comparison is of manifests (kind, mode, content digest, link target), so it costs
nothing per unchanged file; only the changed text files are read, at most
``TEXT_DIFFS`` of them, each side at most ``TEXT_DIFF_BYTES``.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from contracts.workspace import EntryKind, Manifest, ManifestEntry
from session_api.workspace_views import Change, PathChange

#: a side larger than this is not diffed (its change is still listed)
TEXT_DIFF_BYTES: Final = 256 * 1024
#: at most this many files are diffed in one answer; later changes are only listed
TEXT_DIFFS: Final = 100
#: files read at once
_READS: Final = 8

#: reads a file's contents (``store.workspaces.file``)
ReadFile = Callable[[ManifestEntry], Awaitable[bytes]]


async def diff(read: ReadFile, before: Manifest, after: Manifest) -> list[PathChange]:
    """The paths that differ from ``before`` to ``after``, in path order."""
    old = {entry.path: entry for entry in before.entries}
    new = {entry.path: entry for entry in after.entries}
    changes = [
        _change(path, old.get(path), new.get(path))
        for path in sorted(old.keys() | new.keys())
        if old.get(path) != new.get(path)
    ]
    textual = [change for change in changes if _contents_differ(change)]
    reads = asyncio.Semaphore(_READS)

    async def with_text(change: PathChange) -> PathChange:
        async with reads:
            return await _with_text(read, change)

    diffed = await asyncio.gather(*(with_text(change) for change in textual[:TEXT_DIFFS]))
    done = {change.path: change for change in diffed}
    skipped = f"not diffed: only the first {TEXT_DIFFS} changed files are"
    for change in textual[TEXT_DIFFS:]:
        done[change.path] = change.model_copy(update={"note": skipped})
    return [done.get(change.path, change) for change in changes]


def unified(path: str, before: str | None, after: str | None) -> str:
    """A unified diff of two texts (None: the file is absent on that side), with git's
    marker for a last line without a newline."""
    lines = difflib.unified_diff(
        [] if before is None else before.splitlines(keepends=True),
        [] if after is None else after.splitlines(keepends=True),
        fromfile="/dev/null" if before is None else f"a/{path}",
        tofile="/dev/null" if after is None else f"b/{path}",
    )
    return "".join(_terminated(lines))


def text_of(data: bytes) -> str | None:
    """``data`` as text, or None when it is binary (a NUL byte, or not UTF-8)."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _change(path: str, before: ManifestEntry | None, after: ManifestEntry | None) -> PathChange:
    if before is None:
        return PathChange(path=path, change=Change.ADDED, after=after)
    if after is None:
        return PathChange(path=path, change=Change.REMOVED, before=before)
    note = None
    if before.kind is not after.kind:
        note = f"was a {before.kind.value}, is a {after.kind.value}"
    elif before.kind is EntryKind.LINK and before.target != after.target:
        note = f"link target {before.target!r} → {after.target!r}"
    elif before.mode != after.mode and before.digest == after.digest:
        note = f"mode {before.mode:04o} → {after.mode:04o}"
    return PathChange(path=path, change=Change.CHANGED, before=before, after=after, note=note)


def _contents_differ(change: PathChange) -> bool:
    """Whether the change is to a file's contents (a file on each side that has one)."""
    sides = [side for side in (change.before, change.after) if side is not None]
    if any(side.kind is not EntryKind.FILE for side in sides):
        return False
    return len({side.digest for side in sides}) == len(sides)


async def _with_text(read: ReadFile, change: PathChange) -> PathChange:
    sides = [change.before, change.after]
    if any(side is not None and side.size > TEXT_DIFF_BYTES for side in sides):
        limit = TEXT_DIFF_BYTES // 1024
        return change.model_copy(update={"note": f"not diffed: over {limit} KiB"})
    texts: list[str | None] = []
    for side in sides:
        text = None if side is None else text_of(await read(side))
        if side is not None and text is None:
            return change.model_copy(update={"note": "binary: not diffed"})
        texts.append(text)
    return change.model_copy(update={"diff": unified(change.path, *texts)})


def _terminated(lines: Iterable[str]) -> Iterable[str]:
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n\\ No newline at end of file\n"
