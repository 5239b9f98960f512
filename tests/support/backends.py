"""Backend decorators for tests: one counts what a load reads, one makes chosen calls
fail. Each wraps a real backend (SQLite, S3 or DynamoDB) and passes every call through
to it; neither fakes a server.
"""

from __future__ import annotations

from contracts import StoreUnavailable
from session_store.backend import Backend


class Passthrough:
    """Every call goes to the wrapped backend; subclasses override what they watch."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.max_item_bytes = inner.max_item_bytes
        self.description = inner.description
        self.clock = inner.clock

    async def create(self, partition: str, item: str, value: bytes) -> None:
        await self._inner.create(partition, item, value)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        await self._inner.put(partition, item, value)

    async def delete(self, partition: str, item: str) -> None:
        await self._inner.delete(partition, item)

    async def get(self, partition: str, item: str) -> bytes | None:
        return await self._inner.get(partition, item)

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        return await self._inner.items(partition, after=after, limit=limit)

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        return await self._inner.keys(partition, after=after)

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        return await self._inner.last(partition)

    async def ensure(self) -> None:
        await self._inner.ensure()

    async def check(self) -> None:
        await self._inner.check()

    async def close(self) -> None:
        await self._inner.close()


class IndexOutage(Passthrough):
    """Index writes fail once the first commit record has been written."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.broken = False

    async def create(self, partition: str, item: str, value: bytes) -> None:
        if "/log" in partition:
            self.broken = True
        await super().create(partition, item, value)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        self._fail_index(partition)
        await super().put(partition, item, value)

    async def delete(self, partition: str, item: str) -> None:
        self._fail_index(partition)
        await super().delete(partition, item)

    def _fail_index(self, partition: str) -> None:
        if self.broken and partition.startswith("index/"):
            raise StoreUnavailable(f"{self.description}: the index is unreachable (test fault)")


class Counting(Passthrough):
    """Counts the calls made and the bytes returned by reads."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.calls = 0
        self.bytes_read = 0

    async def create(self, partition: str, item: str, value: bytes) -> None:
        self.calls += 1
        await super().create(partition, item, value)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        self.calls += 1
        await super().put(partition, item, value)

    async def delete(self, partition: str, item: str) -> None:
        self.calls += 1
        await super().delete(partition, item)

    async def get(self, partition: str, item: str) -> bytes | None:
        self.calls += 1
        value = await super().get(partition, item)
        self.bytes_read += len(value or b"")
        return value

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        self.calls += 1
        found = await super().items(partition, after=after, limit=limit)
        self.bytes_read += sum(len(value) for _, value in found)
        return found

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        self.calls += 1
        return await super().keys(partition, after=after)

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        self.calls += 1
        found = await super().last(partition)
        self.bytes_read += len(found[1]) if found else 0
        return found
