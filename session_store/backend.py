"""The boundary every storage engine implements: create-once items in ordered partitions.

The whole commit protocol rests on one primitive that SQLite (primary key), S3
(``PutObject`` with ``IfNoneMatch="*"``) and DynamoDB (``PutItem`` with
``attribute_not_exists``) all provide: *create an item only if it does not exist*.
Everything else the store does is built from these few calls, so the three backends
behave the same by construction and are checked by one conformance suite.

A key is a ``(partition, item)`` pair. Items within a partition are listed in ascending
byte order of ``item``; callers zero-pad numbers so that this is numeric order.
"""

from __future__ import annotations

from typing import Protocol

from session_store.clock import StoreClock


class ItemExists(Exception):
    """``create`` found the item already there. Internal to the store; never escapes it."""


class Backend(Protocol):
    """A storage engine. Implementations translate their library's errors into
    ``contracts.errors`` (``StoreUnavailable``, ``StoreMissing``, ``ReadOnlyStore``) and
    raise ``ItemExists`` from ``create``."""

    #: largest value one item may hold; the store chunks blobs to fit it.
    max_item_bytes: int
    #: a short, credential-free description for messages and logs.
    description: str

    @property
    def clock(self) -> StoreClock:
        """The store's own time, shared by every process that uses it
        (``session_store.clock``)."""
        ...

    async def create(self, partition: str, item: str, value: bytes) -> None:
        """Write ``value`` only if ``(partition, item)`` does not exist; else ``ItemExists``."""
        ...

    async def put(self, partition: str, item: str, value: bytes) -> None:
        """Write ``value`` whether or not the item exists (index markers only)."""
        ...

    async def get(self, partition: str, item: str) -> bytes | None:
        """Value of the item, or None when absent."""
        ...

    async def delete(self, partition: str, item: str) -> None:
        """Remove the item; absent items are not an error."""
        ...

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        """Items of a partition with their values, ascending, strictly after ``after``."""
        ...

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        """Item names of a partition, ascending, strictly after ``after``."""
        ...

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        """The greatest item of a partition with its value, or None when empty."""
        ...

    async def ensure(self) -> None:
        """Create the bucket/table/file if missing (operators' ``bh store init``)."""
        ...

    async def check(self) -> None:
        """Raise ``StoreMissing``/``StoreUnavailable`` when the store cannot be used."""
        ...

    async def close(self) -> None: ...
