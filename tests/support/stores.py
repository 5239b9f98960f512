"""Store locations for tests: a fresh SQLite file, S3 prefix or DynamoDB table each time.

Backends: ``sqlite``, ``s3`` and ``dynamodb`` (on moto), and ``rgw`` (S3 on Ceph's
radosgw, a second S3 server; the store's conformance, concurrency and crash suites run on
it too, through ``location_fixture(SUITE_BACKENDS)``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from session_store import SessionStore, open_backend, open_store
from tests.support.services import aws_environment, require, rgw_credentials

BACKENDS = ("sqlite", "s3", "dynamodb")
SUITE_BACKENDS = (*BACKENDS, "rgw")
#: the marker each backend's tests carry (radosgw is an S3 API server)
_MARKS = {
    "sqlite": pytest.mark.sqlite,
    "s3": pytest.mark.s3,
    "dynamodb": pytest.mark.dynamodb,
    "rgw": pytest.mark.s3,
}


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
    """A fresh location and a coroutine function that makes it. ``rgw`` needs its keys in
    the environment before that (``services.rgw_credentials``)."""
    token = uuid.uuid4().hex[:12]
    if kind == "sqlite":
        return StoreLocation(kind, f"sqlite:///{tmp_path}/store-{token}.db"), _nothing
    if kind == "rgw":
        gateway = require("BH_RGW_ENDPOINT_URL", "radosgw", start="bh dev up --require rgw")
        url = f"s3://bh-tests/{token}?endpoint_url={gateway}"
        return StoreLocation(kind, url), lambda: _create(url)
    endpoint = require("BH_AWS_ENDPOINT_URL", "the S3/DynamoDB API server (moto)")
    aws_environment()
    if kind == "s3":
        url = f"s3://bh-tests/{token}?endpoint_url={endpoint}"
        return StoreLocation(kind, url), lambda: _create(url)
    url = f"dynamodb://bh-{token}?endpoint_url={endpoint}"
    return StoreLocation(kind, url), lambda: _create(url)


def location_fixture(kinds: Sequence[str]) -> Any:
    """A ``location`` fixture over ``kinds``: a test module that assigns it to its own
    ``location`` runs its tests on those backends instead of the conftest's."""

    @pytest.fixture(params=[pytest.param(kind, marks=_MARKS[kind], id=kind) for kind in kinds])
    async def location(
        request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> AsyncIterator[StoreLocation]:
        place, prepare = new_location(request.param, tmp_path)
        if request.param == "rgw":
            rgw_credentials(monkeypatch)
        await prepare()
        yield place
        await place.close_all()
        await _remove(place)

    return location


async def _remove(place: StoreLocation) -> None:
    """What outlives the test otherwise: a DynamoDB table in moto's memory, objects in
    radosgw's cluster (kept across runs)."""
    if place.kind == "dynamodb":
        await drop_table(place.url)
    elif place.kind == "rgw":
        await drop_objects(place.url)


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


async def drop_objects(url: str) -> None:
    """Delete every object under a test's S3 prefix."""
    import aiobotocore.session

    parts = urlsplit(url)
    prefix = parts.path.strip("/") + "/"
    endpoint = dict(parse_qsl(parts.query))["endpoint_url"]
    session = aiobotocore.session.get_session()
    async with session.create_client("s3", endpoint_url=endpoint, region_name="us-east-1") as s3:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=parts.netloc, Prefix=prefix)
        async for page in pages:
            keys = [{"Key": found["Key"]} for found in page.get("Contents", ())]
            if keys:
                await s3.delete_objects(Bucket=parts.netloc, Delete={"Objects": keys})
