"""SQLite backend: the embedded default, one file shared by the processes of one machine.

One table, ``kv(partition, item, value)``, primary key ``(partition, item)``; a create is
a plain ``INSERT`` (the primary key refuses a second one). WAL journal with
``synchronous=FULL``: every create is fsynced before it returns. All calls run on one
dedicated thread per backend that owns the connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from contracts import ReadOnlyStore, StoreMissing, StoreUnavailable
from session_store.backend import ItemExists

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    partition TEXT NOT NULL,
    item      TEXT NOT NULL,
    value     BLOB NOT NULL,
    PRIMARY KEY (partition, item)
) WITHOUT ROWID
"""


class SqliteBackend:
    max_item_bytes = 16 * 1024 * 1024

    def __init__(self, path: Path, *, read_only: bool = False, create: bool = True) -> None:
        self.path = path
        self.description = f"sqlite:///{path}"
        self._read_only = read_only
        self._create = create
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bh-sqlite")
        self._connection: sqlite3.Connection | None = None

    async def open(self) -> SqliteBackend:
        await self._run(self._connect)
        return self

    async def create(self, partition: str, item: str, value: bytes) -> None:
        await self._run(self._insert, partition, item, value)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        await self._run(
            self._execute,
            "INSERT OR REPLACE INTO kv (partition, item, value) VALUES (?, ?, ?)",
            (partition, item, value),
        )

    async def get(self, partition: str, item: str) -> bytes | None:
        rows = await self._run(
            self._query,
            "SELECT value FROM kv WHERE partition = ? AND item = ?",
            (partition, item),
        )
        return bytes(rows[0][0]) if rows else None

    async def delete(self, partition: str, item: str) -> None:
        await self._run(
            self._execute, "DELETE FROM kv WHERE partition = ? AND item = ?", (partition, item)
        )

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        rows = await self._run(
            self._query,
            "SELECT item, value FROM kv WHERE partition = ? AND item > ? ORDER BY item LIMIT ?",
            (partition, after or "", -1 if limit is None else limit),
        )
        return [(str(item), bytes(value)) for item, value in rows]

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        rows = await self._run(
            self._query,
            "SELECT item FROM kv WHERE partition = ? AND item > ? ORDER BY item",
            (partition, after or ""),
        )
        return [str(item) for (item,) in rows]

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        rows = await self._run(
            self._query,
            "SELECT item, value FROM kv WHERE partition = ? ORDER BY item DESC LIMIT 1",
            (partition,),
        )
        return (str(rows[0][0]), bytes(rows[0][1])) if rows else None

    async def ensure(self) -> None:
        await self.open()

    async def check(self) -> None:
        await self._run(self._query, "SELECT 1 FROM kv LIMIT 1", ())

    async def close(self) -> None:
        if self._connection is not None:
            await self._run(self._connection.close)
            self._connection = None
        self._executor.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._translate, fn, args)

    def _translate(self, fn: Callable[..., T], args: tuple[object, ...]) -> T:
        try:
            return fn(*args)
        except sqlite3.IntegrityError:
            raise ItemExists from None
        except sqlite3.OperationalError as error:
            message = str(error)
            if "readonly" in message:
                raise ReadOnlyStore(f"{self.description} is read-only: {message}") from None
            if "no such table" in message:
                raise StoreMissing(
                    f"{self.description} has no brainhands tables; run `bh store init`"
                ) from None
            raise StoreUnavailable(f"{self.description}: {message}") from None
        except sqlite3.DatabaseError as error:
            raise StoreUnavailable(f"{self.description} cannot be used: {error}") from None

    def _connect(self) -> None:
        if self._connection is not None:
            return
        if not self.path.exists() and (self._read_only or not self._create):
            raise StoreMissing(
                f"SQLite store file {self.path} does not exist; create it with "
                "`bh store init URL` or by opening it for writing"
            )
        if not self._read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = "ro" if self._read_only else "rwc"
        connection = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode={mode}",
            uri=True,
            isolation_level=None,  # autocommit: each statement is its own transaction
            check_same_thread=False,
            timeout=30.0,
        )
        connection.execute("PRAGMA busy_timeout = 30000")
        if not self._read_only:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute(_SCHEMA)
        self._connection = connection

    def _insert(self, partition: str, item: str, value: bytes) -> None:
        self._execute(
            "INSERT INTO kv (partition, item, value) VALUES (?, ?, ?)", (partition, item, value)
        )

    def _execute(self, sql: str, params: tuple[object, ...]) -> None:
        assert self._connection is not None, "backend used before open()"
        self._connection.execute(sql, params)

    def _query(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        assert self._connection is not None, "backend used before open()"
        return self._connection.execute(sql, params).fetchall()
