"""Store locations for tests: a fresh SQLite file, S3 prefix or DynamoDB table each time."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_store import SessionStore, open_backend, open_store
from tests.support.services import aws_environment, require

BACKENDS = ("sqlite", "s3", "dynamodb")


@dataclass
class StoreLocation:
    """One store (file, bucket prefix or table) that several clients can open."""

    kind: str
    url: str
    opened: list[SessionStore] = field(default_factory=list)

    async def open(self, **settings: Any) -> SessionStore:
        store = await open_store(self.url, **settings)
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()
        self.opened.clear()


def new_location(kind: str, tmp_path: Path) -> tuple[StoreLocation, Callable[[], Awaitable[None]]]:
    """A fresh location and a coroutine function that removes it afterwards."""
    token = uuid.uuid4().hex[:12]
    if kind == "sqlite":
        return StoreLocation(kind, f"sqlite:///{tmp_path}/store-{token}.db"), _nothing
    endpoint = require("BH_AWS_ENDPOINT_URL", "the S3/DynamoDB API server (moto)")
    aws_environment()
    if kind == "s3":
        url = f"s3://bh-tests/{token}?endpoint_url={endpoint}"
        return StoreLocation(kind, url), lambda: _create(url)
    url = f"dynamodb://bh-{token}?endpoint_url={endpoint}"
    return StoreLocation(kind, url), lambda: _create(url)


async def _nothing() -> None:
    return None


async def _create(url: str) -> None:
    backend = await open_backend(url, create=True)
    await backend.close()


async def drop_table(url: str) -> None:
    """Delete a test's DynamoDB table so the API server's memory stays flat."""
    import aiobotocore.session

    table, _, query = url.removeprefix("dynamodb://").partition("?")
    endpoint = query.removeprefix("endpoint_url=")
    session = aiobotocore.session.get_session()
    async with session.create_client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1"
    ) as client:
        await client.delete_table(TableName=table)
