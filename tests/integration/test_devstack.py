"""The services `bh dev up` starts answer the way the rest of the suite relies on.

The URLs come from the environment `bh dev env` exports (scripts/test evals it), with no
defaults: a broken export must fail here, not be papered over. Locally a missing or
unreachable service skips; under CI=true it fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import nats
import nats.errors
import pytest
import redis.exceptions
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import EndpointConnectionError
from nats.aio.client import Client as NATS

from coordination import redis_client
from runtime.credentials import endpoint
from tests.support.services import in_ci


def _missing(message: str) -> NoReturn:
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _url(variable: str) -> str:
    url = os.environ.get(variable)
    if not url:
        _missing(f'{variable} is not set: run `bh dev up` and `eval "$(bh dev env)"`')
    return url


@pytest.mark.redis
async def test_redis_answers_ping_and_keeps_a_key() -> None:
    url = _url("BH_REDIS_URL")
    client = redis_client.connect(url, socket_connect_timeout=2)
    try:
        try:
            pong = await client.ping()
        except redis.exceptions.ConnectionError as exc:
            _missing(f"Redis at {url} is unreachable: {exc}")
        assert pong is True
        key = f"bh-devstack-test:{uuid.uuid4().hex}"
        await client.set(key, "value", ex=60)
        assert await client.get(key) == b"value"
        await client.delete(key)
    finally:
        await client.aclose()


async def _quiet(error: Exception) -> None:
    """nats-py logs every failed connect with a traceback; the test reports it instead."""


@pytest.fixture
async def nats_client() -> AsyncIterator[NATS]:
    url = _url("BH_NATS_URL")
    try:
        # max_reconnect_attempts=0 would mean "retry forever" in nats-py; 1 gives up.
        found = endpoint(url)
        client = await nats.connect(
            found.url,
            user=found.username,
            password=found.password,
            connect_timeout=2,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=_quiet,
        )
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        _missing(f"NATS at {url} is unreachable: {exc!r}")
    yield client
    await client.close()


@pytest.mark.nats
async def test_nats_has_jetstream_with_file_storage(nats_client: NATS) -> None:
    js = nats_client.jetstream()
    account = await js.account_info()
    assert account.limits is not None
    stream = f"BH_DEVSTACK_{uuid.uuid4().hex[:12].upper()}"
    subject = f"devstack.{stream.lower()}"
    await js.add_stream(name=stream, subjects=[subject])  # file storage: needs --store_dir
    try:
        ack = await js.publish(subject, b"hello")
        assert (ack.stream, ack.seq) == (stream, 1)
    finally:
        await js.delete_stream(stream)


def _aws_client_args() -> dict[str, Any]:
    # Explicit dummy credentials: never let botocore pick up real ones for a local server.
    return {
        "endpoint_url": _url("BH_AWS_ENDPOINT_URL"),
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "config": AioConfig(connect_timeout=2, read_timeout=10, retries={"max_attempts": 1}),
    }


@pytest.mark.s3
async def test_moto_serves_s3_buckets() -> None:
    args = _aws_client_args()
    async with get_session().create_client("s3", **args) as s3:
        try:
            await s3.list_buckets()
        except EndpointConnectionError as exc:
            _missing(f"the S3 API at {args['endpoint_url']} is unreachable: {exc}")
        bucket = f"bh-devstack-{uuid.uuid4().hex[:12]}"
        await s3.create_bucket(Bucket=bucket)
        try:
            names = [b.get("Name") for b in (await s3.list_buckets()).get("Buckets", [])]
            assert bucket in names
        finally:
            await s3.delete_bucket(Bucket=bucket)


@pytest.mark.dynamodb
async def test_moto_serves_dynamodb_in_the_same_process() -> None:
    args = _aws_client_args()
    async with get_session().create_client("dynamodb", **args) as dynamodb:
        try:
            tables = await dynamodb.list_tables()
        except EndpointConnectionError as exc:
            _missing(f"the DynamoDB API at {args['endpoint_url']} is unreachable: {exc}")
        assert isinstance(tables.get("TableNames"), list)
