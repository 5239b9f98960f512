"""SQLite backend: the embedded default, one file shared by the processes of one machine.

One table, ``kv(partition, item, value)``, primary key ``(partition, item)``; a create is
a plain ``INSERT`` (the primary key refuses a second one). A second, ``clock``, holds the
store's clock anchor for this boot (``session_store.clock.MachineClock``). WAL journal with
``synchronous=FULL``: every create is fsynced before it returns.

Each call first runs right on the event loop with ``busy_timeout=0``: uncontended, a
statement takes about as long as a thread hand-off would (~60 µs here), so this halves
the overhead over a bare transaction. If another process holds the write lock, the call
moves to a dedicated thread whose connection waits (``busy_timeout``) without blocking
the loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from contracts import ReadOnlyStore, StoreMissing, StoreUnavailable
from session_store.backend import ItemExists
from session_store.clock import MachineClock, boot_id, boot_seconds

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    partition TEXT NOT NULL,
    item      TEXT NOT NULL,
    value     BLOB NOT NULL,
    PRIMARY KEY (partition, item)
) WITHOUT ROWID
"""

_CLOCK_SCHEMA = """
CREATE TABLE IF NOT EXISTS clock (
    boot  TEXT PRIMARY KEY,
    epoch REAL NOT NULL,
    since REAL NOT NULL
)
"""


#: inline calls yield to the event loop at least this often
_YIELD_EVERY_S = 0.001


class SqliteBackend:
    max_item_bytes = 16 * 1024 * 1024

    def __init__(self, path: Path, *, read_only: bool = False, create: bool = True) -> None:
        self.path = path
        self.description = f"sqlite:///{path}"
        self._read_only = read_only
        self._create = create
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bh-sqlite")
        self._inline: sqlite3.Connection | None = None  # used on the event loop only
        self._waiting: sqlite3.Connection | None = None  # used on the executor thread only
        self._yielded = 0.0  # when a call last yielded to the loop (monotonic)
        #: the store's clock: this machine's, from the anchor the file keeps per boot
        self.clock = MachineClock()

    async def open(self) -> SqliteBackend:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._translate, self._connect, ())
        return self

    async def create(self, partition: str, item: str, value: bytes) -> None:
        await self._run(_insert, partition, item, value)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        await self._run(
            _execute,
            "INSERT OR REPLACE INTO kv (partition, item, value) VALUES (?, ?, ?)",
            (partition, item, value),
        )

    async def get(self, partition: str, item: str) -> bytes | None:
        rows = await self._run(
            _query,
            "SELECT value FROM kv WHERE partition = ? AND item = ?",
            (partition, item),
        )
        return bytes(rows[0][0]) if rows else None

    async def delete(self, partition: str, item: str) -> None:
        await self._run(
            _execute, "DELETE FROM kv WHERE partition = ? AND item = ?", (partition, item)
        )

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        rows = await self._run(
            _query,
            "SELECT item, value FROM kv WHERE partition = ? AND item > ? ORDER BY item LIMIT ?",
            (partition, after or "", -1 if limit is None else limit),
        )
        return [(str(item), bytes(value)) for item, value in rows]

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        rows = await self._run(
            _query,
            "SELECT item FROM kv WHERE partition = ? AND item > ? ORDER BY item",
            (partition, after or ""),
        )
        return [str(item) for (item,) in rows]

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        rows = await self._run(
            _query,
            "SELECT item, value FROM kv WHERE partition = ? ORDER BY item DESC LIMIT 1",
            (partition,),
        )
        return (str(rows[0][0]), bytes(rows[0][1])) if rows else None

    async def ensure(self) -> None:
        await self.open()

    async def check(self) -> None:
        await self._run(_query, "SELECT 1 FROM kv LIMIT 1", ())

    async def close(self) -> None:
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        if self._waiting is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._waiting.close)
            self._waiting = None
        self._executor.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(connection, *args)`` inline; on lock contention, on the waiting thread."""
        if self._inline is None or self._waiting is None:
            raise StoreUnavailable(f"{self.description} is closed or was never opened")
        try:
            result = self._translate(fn, (self._inline, *args), contended=_Contended)
        except _Contended:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._executor, self._translate, fn, (self._waiting, *args)
            )
        # Yield now and then, as a real I/O wait would: a tight loop of store calls must
        # not starve the other tasks of this loop (lease renewals, background baselines).
        # Not after every call: each yield is a turn of the loop (~10 µs of a ~150 µs
        # durable phase), and a millisecond is well inside what any other task waits for.
        now = time.monotonic()
        if now - self._yielded >= _YIELD_EVERY_S:
            self._yielded = now
            await asyncio.sleep(0)
        return result

    def _translate(
        self,
        fn: Callable[..., T],
        args: tuple[object, ...],
        contended: type[Exception] | None = None,
    ) -> T:
        try:
            return fn(*args)
        except sqlite3.IntegrityError:
            raise ItemExists from None
        except sqlite3.OperationalError as error:
            message = str(error)
            if contended is not None and ("locked" in message or "busy" in message):
                raise contended from None
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
        if self._inline is not None:
            return
        if not self.path.exists() and (self._read_only or not self._create):
            raise StoreMissing(
                f"SQLite store file {self.path} does not exist; create it with "
                "`bh store init URL` or by opening it for writing"
            )
        if not self._read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._waiting = self._new_connection(busy_ms=30_000)
        if not self._read_only:
            self._prepare(self._waiting)
        self.clock = MachineClock(_anchor(self._waiting, write=not self._read_only))
        self._inline = self._new_connection(busy_ms=0)

    def _prepare(self, connection: sqlite3.Connection) -> None:
        # Switching a new file to WAL takes an exclusive lock and may report "locked"
        # without waiting for the busy handler, when several processes open the same
        # new file at once; retry for as long as a statement would wait.
        deadline = time.monotonic() + 30
        while True:
            try:
                if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    connection.execute("PRAGMA journal_mode = WAL")
                connection.execute(_SCHEMA)
                connection.execute(_CLOCK_SCHEMA)
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _new_connection(self, *, busy_ms: int) -> sqlite3.Connection:
        mode = "ro" if self._read_only else "rwc"
        connection = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode={mode}",
            uri=True,
            isolation_level=None,  # autocommit: each statement is its own transaction
            check_same_thread=False,  # each connection is still used by one thread only
            timeout=busy_ms / 1000,
        )
        connection.execute(f"PRAGMA busy_timeout = {busy_ms}")
        connection.execute("PRAGMA synchronous = FULL")
        return connection


def _anchor(connection: sqlite3.Connection, *, write: bool) -> tuple[float, float] | None:
    """This boot's clock anchor (epoch, boot seconds): the first process to open the file
    this boot writes it, every process reads the same one. None where the machine tells
    no boot, or a read-only store finds none."""
    boot = boot_id()
    if boot is None:
        return None
    try:
        if write:
            connection.execute(
                "INSERT OR IGNORE INTO clock (boot, epoch, since) VALUES (?, ?, ?)",
                (boot, time.time(), boot_seconds()),
            )
            connection.execute("DELETE FROM clock WHERE boot != ?", (boot,))
        row = connection.execute(
            "SELECT epoch, since FROM clock WHERE boot = ?", (boot,)
        ).fetchone()
    except sqlite3.OperationalError:  # a read-only file of an older version: no table
        return None
    return None if row is None else (float(row[0]), float(row[1]))


class _Contended(Exception):
    """The inline attempt met another process's lock; retry on the waiting thread."""


def _insert(connection: sqlite3.Connection, partition: str, item: str, value: bytes) -> None:
    connection.execute(
        "INSERT INTO kv (partition, item, value) VALUES (?, ?, ?)", (partition, item, value)
    )


def _execute(connection: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    connection.execute(sql, params)


def _query(
    connection: sqlite3.Connection, sql: str, params: tuple[object, ...]
) -> list[tuple[Any, ...]]:
    return connection.execute(sql, params).fetchall()
