"""A working tree and the version it holds: materialised by difference, never by copy.

A tree on a Hands' disk is used only while it is known to equal a version: its
``TreeState`` records that version's manifest and, per file, the status it had when it
was last written or hashed (size, mtime, inode, ctime). To materialise version V in a
tree that holds H, only the difference is applied — files that changed are written
(from the cache), paths V does not hold are removed, modes and links are fixed — so the
time taken is proportional to what changed, not to the workspace's size. A tree whose
state is unknown (a run in it produced no version, a crash) is not used: the caller
starts from an empty directory (``held=None``), which is a full rebuild.

After the last write the state's ``stamp`` is taken: the ctime of a file written just
now. A snapshot trusts a file's recorded status only when the file's status is unchanged
and was recorded before the stamp; a file written in the stamp's own clock tick is
hashed again (a tool could have changed it within that tick).
"""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from contracts.errors import WorkspaceRefused
from contracts.workspace import EntryKind, Manifest, ManifestEntry
from hands.workspace.confined import Confined, Owner

#: (size, mtime_ns, inode, ctime_ns) of a file as last written or hashed
Stat = tuple[int, int, int, int]
#: copies a file's content (by its digest) into the open file
Source = Callable[[str, BinaryIO], None]
_STAMP = ".stamp"
_GENERATION = "generation"


def stat_of(found: os.stat_result) -> Stat:
    return (found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns)


@dataclass
class TreeState:
    """What a tree holds: a version (``version``: its id; None: the empty workspace) as
    its manifest, and each file's status when it was last written or hashed."""

    version: str | None
    manifest: Manifest
    stats: dict[str, Stat] = field(default_factory=dict)
    #: the ctime (ns) of the stamp taken after the last write (see the module's doc)
    stamp: int = 0
    #: a token saved beside it (``generation_at``): a process that kept this state in
    #: memory knows the tree on disk is the one it saved, without reading it back
    generation: str = ""

    def trusted(self, path: str, now: Stat) -> bool:
        """Whether a file whose status is ``now`` still holds what was recorded."""
        recorded = self.stats.get(path)
        return recorded is not None and recorded == now and recorded[3] < self.stamp

    def save(self, where: Path) -> None:
        document = {
            "version": self.version,
            "manifest": json.loads(self.manifest.canonical()),
            "stats": self.stats,
            "stamp": self.stamp,
        }
        draft = where.with_name(f".{where.name}.draft")
        draft.write_text(json.dumps(document, separators=(",", ":")))
        os.replace(draft, where)
        self.generation = uuid.uuid4().hex
        token = where.with_name(".generation.draft")
        token.write_text(self.generation)
        os.replace(token, where.with_name(_GENERATION))

    @staticmethod
    def generation_at(where: Path) -> str | None:
        """The token of the state saved at ``where`` (None: none)."""
        try:
            return where.with_name(_GENERATION).read_text()
        except OSError:
            return None

    @classmethod
    def load(cls, where: Path) -> TreeState | None:
        """The state saved at ``where``; None when there is none or it does not read."""
        try:
            document = json.loads(where.read_text())
            manifest = Manifest.model_validate(document["manifest"])
            stats = {path: _stat(value) for path, value in document["stats"].items()}
            state = cls(document["version"], manifest, stats, int(document["stamp"]))
            state.generation = TreeState.generation_at(where) or ""
            return state
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _stat(value: list[int]) -> Stat:
    size, mtime, inode, ctime = (int(part) for part in value)
    return (size, mtime, inode, ctime)


EMPTY = Manifest()


@dataclass(frozen=True)
class Plan:
    """The difference from a held manifest to a target: what to remove (deepest first),
    then what to create or rewrite and whose mode to fix (in path order)."""

    remove: tuple[str, ...]
    write: tuple[ManifestEntry, ...]
    modes: tuple[ManifestEntry, ...]

    @property
    def files(self) -> set[str]:
        """The digests of the files to write."""
        return {e.digest for e in self.write if e.digest is not None}


def plan(held: Manifest, target: Manifest) -> Plan:
    """What turns a tree holding ``held`` into one holding ``target``."""
    before = {entry.path: entry for entry in held.entries}
    after = {entry.path: entry for entry in target.entries}
    remove, write, modes = [], [], []
    for path, was in before.items():
        kept = after.get(path)
        if (
            kept is None
            or kept.kind is not was.kind
            or (kept.kind is EntryKind.LINK and kept != was)
        ):
            remove.append(path)
    gone = set(remove)
    for path, new in after.items():
        old = before.get(path)
        if old is None or path in gone or (new.kind is EntryKind.FILE and new.digest != old.digest):
            write.append(new)
        elif new.mode != old.mode and new.kind is not EntryKind.LINK:
            modes.append(new)
    return Plan(tuple(sorted(remove, reverse=True)), tuple(write), tuple(modes))


def materialise(
    root: Path,
    held: TreeState | None,
    target: Manifest,
    version: str | None,
    source: Source,
    *,
    owner: Owner | None,
) -> TreeState:
    """Make the tree at ``root`` hold ``target`` (version ``version``): the difference
    from ``held`` (None: ``root`` is empty), written with ``source`` for file contents.
    Blocking: run it in a thread. ``WorkspaceRefused`` for a path that leaves the tree."""
    base = held.manifest if held is not None else EMPTY
    change = plan(base, target)
    stats = {path: value for path, value in (held.stats if held else {}).items()}
    with Confined(root, owner=owner) as tree:
        for path in change.remove:
            tree.remove(path)
            stats.pop(path, None)
        for entry in change.write:
            _write(tree, entry, source, stats)
        for entry in change.modes:
            stats_of = tree.set_mode(entry.path, entry.mode)
            if entry.kind is EntryKind.FILE:
                stats[entry.path] = stat_of(stats_of)
        # a directory's own mode last: a read-only one is filled before it is closed
        for entry in sorted(change.write, key=lambda e: e.path, reverse=True):
            if entry.kind is EntryKind.DIR:
                tree.set_mode(entry.path, entry.mode)
    files = {entry.path for entry in target.entries if entry.kind is EntryKind.FILE}
    return TreeState(
        version, target, {p: s for p, s in stats.items() if p in files}, stamp(root, stats.values())
    )


def _write(tree: Confined, entry: ManifestEntry, source: Source, stats: dict[str, Stat]) -> None:
    found = tree.lstat(entry.path)
    if entry.kind is EntryKind.DIR:
        if found is not None and not stat.S_ISDIR(found.st_mode):
            tree.remove(entry.path)
        tree.make_dir(entry.path, 0o700 | entry.mode)
        return
    if found is not None and stat.S_ISDIR(found.st_mode):
        tree.remove(entry.path)  # a directory in its place (only in an unknown tree)
    if entry.kind is EntryKind.LINK:
        assert entry.target is not None
        if found is not None:
            tree.remove(entry.path)
        tree.make_link(entry.path, entry.target)
        return
    assert entry.digest is not None
    digest = entry.digest
    written = tree.write_file(entry.path, entry.mode, lambda file: source(digest, file))
    if written.st_size != entry.size:
        raise WorkspaceRefused(
            f"{entry.path}: its content is {written.st_size} bytes, its manifest says {entry.size}",
            path=entry.path,
        )
    stats[entry.path] = stat_of(written)


def stamp(root: Path, after: Iterable[Stat] = ()) -> int:
    """The ctime of a file written now, beside the tree (after every write to it), once
    it is later than every ctime in ``after``: file times tick with the kernel's coarse
    clock, so a file recorded in the stamp's own tick would not be trusted and would be
    hashed again. Waits at most one tick."""
    latest = max((recorded[3] for recorded in after), default=0)
    where = root.parent / _STAMP
    while True:
        where.write_text(uuid.uuid4().hex)  # new bytes: its times change, whatever the clock
        taken = os.stat(where).st_ctime_ns
        if taken > latest:
            return taken
        time.sleep(0.001)


def digests(entries: Iterable[ManifestEntry]) -> set[str]:
    return {entry.digest for entry in entries if entry.digest is not None}
