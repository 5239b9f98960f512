"""A workspace version as a tar stream (POSIX pax format), made as it is sent.

Links are stored as links (their target as text, never followed), directories and
files with their permission bits, owned by uid/gid 0, every member dated ``mtime``.
Memory stays bounded whatever the workspace's size: files are read ahead in path
order only while the bytes read and not yet sent stay within ``window_bytes`` (one
file is always let through, so the bound is the window or the largest file).
"""

from __future__ import annotations

import asyncio
import tarfile
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from typing import Any, Final

from contracts import CorruptRecord
from contracts.workspace import EntryKind, Manifest, ManifestEntry
from runtime.cancellation import cancel_and_wait

#: bytes of file contents read ahead of the stream, at most (unless one file is larger)
WINDOW_BYTES: Final = 16 * 1024 * 1024
_BLOCK: Final = tarfile.BLOCKSIZE
_RECORD: Final = tarfile.RECORDSIZE

#: reads a file's contents (``store.workspaces.file``)
ReadFile = Callable[[ManifestEntry], Coroutine[Any, Any, bytes]]


async def tar_stream(
    read: ReadFile, manifest: Manifest, *, mtime: float, window_bytes: int = WINDOW_BYTES
) -> AsyncIterator[bytes]:
    """The tar archive of ``manifest``'s tree, a member at a time."""
    sent = 0
    async for entry, data in _read_ahead(read, manifest.entries, window_bytes):
        header = member(entry, mtime)
        padding = -len(data) % _BLOCK
        sent += len(header) + len(data) + padding
        yield header
        if data:
            yield data
            yield b"\0" * padding
    # two zero blocks end the archive; tar's readers expect whole records
    end = 2 * _BLOCK
    yield b"\0" * (end + -(sent + end) % _RECORD)


def member(entry: ManifestEntry, mtime: float) -> bytes:
    """The tar header of one manifest entry."""
    info = tarfile.TarInfo(entry.path)
    info.mtime = int(mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = entry.mode
    if entry.kind is EntryKind.FILE:
        info.type, info.size = tarfile.REGTYPE, entry.size
    elif entry.kind is EntryKind.DIR:
        info.type = tarfile.DIRTYPE
    else:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target or "", 0o777
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


async def _read_ahead(
    read: ReadFile, entries: Iterable[ManifestEntry], window_bytes: int
) -> AsyncIterator[tuple[ManifestEntry, bytes]]:
    """Each entry with its contents (empty for a directory or a link), in order, files
    read concurrently within the window."""
    ahead: deque[tuple[ManifestEntry, asyncio.Task[bytes] | None]] = deque()
    waiting = _Peekable(entries)
    held = 0
    try:
        while True:
            while (entry := waiting.peek()) is not None and (
                not ahead or held + entry.size <= window_bytes
            ):
                next(waiting)
                started: asyncio.Task[bytes] | None = None
                if entry.kind is EntryKind.FILE:
                    started = asyncio.create_task(read(entry))
                    held += entry.size
                ahead.append((entry, started))
            if not ahead:
                return
            entry, task = ahead.popleft()
            if task is None:
                yield entry, b""
                continue
            data = await task
            held -= entry.size
            if len(data) != entry.size:
                raise CorruptRecord(f"{entry.path}: read {len(data):,} of {entry.size:,} bytes")
            yield entry, data
    finally:  # the client went away, or a read failed: stop the reads ahead
        await cancel_and_wait(*(task for _, task in ahead if task is not None))


class _Peekable(Iterator[ManifestEntry]):
    def __init__(self, entries: Iterable[ManifestEntry]) -> None:
        self._entries = iter(entries)
        self._next: ManifestEntry | None = next(self._entries, None)

    def peek(self) -> ManifestEntry | None:
        return self._next

    def __next__(self) -> ManifestEntry:
        if self._next is None:
            raise StopIteration
        current, self._next = self._next, next(self._entries, None)
        return current
