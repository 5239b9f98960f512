"""A Hands' local content-addressed cache of workspace blobs (``BH_HANDS_WORKSPACE_CACHE``).

File contents and manifests a Hands has fetched or snapshotted, each a file named by its
SHA-256 (``<root>/<first two hex digits>/<digest>``), written whole under a temporary
name and renamed into place, so a reader never sees half a blob and several Hands
processes may share one cache. A blob is checked against its digest whenever it is
copied out (``copy_into``); one that is not what its name says is dropped and fetched
again.

Bounded: past ``max_bytes`` the least recently used blobs are removed, except the ones a
materialisation has pinned (it fetched them and is about to copy them). Use is recorded
as the file's modification time, so the order survives a restart.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

#: bytes read or written at once
CHUNK: Final = 1024 * 1024


class CorruptBlob(Exception):
    """A cached blob whose bytes are not the ones its digest names (dropped)."""


class BlobCache:
    """Blobs by digest on this host's disk, at most ``max_bytes`` of them."""

    def __init__(self, root: Path, *, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sizes: dict[str, int] | None = None  # known once the root was scanned
        self._total = 0
        self._pins: dict[str, int] = {}

    # -- reading ---------------------------------------------------------------------------

    def has(self, digest: str) -> bool:
        return self._path(digest).exists()

    def read(self, digest: str) -> bytes | None:
        """The blob's bytes (checked), or None when it is not here."""
        try:
            data = self._path(digest).read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            self._drop(digest)
            return None
        self._used(digest)
        return data

    def copy_into(self, digest: str, target: BinaryIO) -> bool:
        """Copy the blob into ``target``, checking its digest on the way; False when it is
        not here. ``CorruptBlob`` when its bytes are not what its digest says (it is
        dropped: fetch it again)."""
        try:
            source = self._path(digest).open("rb")
        except FileNotFoundError:
            return False
        hasher = hashlib.sha256()
        with source:
            while chunk := source.read(CHUNK):
                hasher.update(chunk)
                target.write(chunk)
        if hasher.hexdigest() != digest:
            self._drop(digest)
            raise CorruptBlob(f"cached blob {digest} is damaged; dropped")
        self._used(digest)
        return True

    # -- writing ---------------------------------------------------------------------------

    def put(self, data: bytes) -> str:
        """Keep ``data``; its digest."""
        digest = hashlib.sha256(data).hexdigest()
        if not self.has(digest):
            with self.writer() as writer:
                writer.write(data)
        else:
            self._used(digest)
        return digest

    @contextlib.contextmanager
    def writer(self) -> Iterator[BlobWriter]:
        """A blob written in pieces (``write``), kept under its digest when the block
        ends without an error (``writer.digest``), dropped otherwise."""
        self.root.mkdir(parents=True, exist_ok=True)
        draft = self.root / f".draft-{uuid.uuid4().hex}"
        writer = BlobWriter(draft.open("wb"))
        try:
            yield writer
            writer.close()
            self._keep(draft, writer.digest, writer.size)
        finally:
            writer.close()
            draft.unlink(missing_ok=True)

    def _keep(self, draft: Path, digest: str, size: int) -> None:
        path = self._path(digest)
        path.parent.mkdir(exist_ok=True)
        os.chmod(draft, 0o444)
        os.replace(draft, path)
        with self._lock:
            sizes = self._scanned()
            self._total += size - sizes.get(digest, 0)
            sizes[digest] = size
        self.evict()

    # -- bounds ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, digests: Iterable[str]) -> Iterator[None]:
        """Within the block, eviction leaves these blobs alone."""
        held = list(digests)
        with self._lock:
            for digest in held:
                self._pins[digest] = self._pins.get(digest, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for digest in held:
                    self._pins[digest] -= 1
                    if not self._pins[digest]:
                        del self._pins[digest]

    def evict(self) -> list[str]:
        """Remove the least recently used blobs until at most ``max_bytes`` are kept
        (pinned ones stay); the digests removed."""
        with self._lock:
            sizes = self._scanned()
            if self._total <= self.max_bytes:
                return []
            by_use = sorted(sizes, key=self._last_use)
            removed = []
            for digest in by_use:
                if self._total <= self.max_bytes:
                    break
                if digest in self._pins:
                    continue
                self._path(digest).unlink(missing_ok=True)
                self._total -= sizes.pop(digest)
                removed.append(digest)
            return removed

    @property
    def size(self) -> int:
        with self._lock:
            self._scanned()
            return self._total

    def _scanned(self) -> dict[str, int]:
        """The blobs here and their sizes (read from disk once; the lock is held)."""
        if self._sizes is None:
            self._sizes = {}
            if self.root.exists():
                for shard in self.root.iterdir():
                    if shard.is_dir() and len(shard.name) == 2:
                        for blob in shard.iterdir():
                            self._sizes[blob.name] = blob.stat().st_size
            self._total = sum(self._sizes.values())
        return self._sizes

    def _last_use(self, digest: str) -> int:
        try:
            return self._path(digest).stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def _used(self, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.utime(self._path(digest))

    def _drop(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)
        with self._lock:
            sizes = self._scanned()
            self._total -= sizes.pop(digest, 0)

    def _path(self, digest: str) -> Path:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"{digest[:80]!r} is not a SHA-256 digest")
        return self.root / digest[:2] / digest


class BlobWriter:
    """A blob being written: its digest and size once closed."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._hasher = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._hasher.update(data)
        self._file.write(data)
        self.size += len(data)

    def close(self) -> None:
        self._file.close()

    @property
    def digest(self) -> str:
        return self._hasher.hexdigest()
