"""S3 backend (AWS S3, MinIO, any S3 with conditional writes).

A create is ``PutObject`` with ``IfNoneMatch="*"``: the object is written only if no
object has that key, which S3 and MinIO guarantee atomically with strong
read-after-write consistency. Listing is ``ListObjectsV2``, which is strongly
consistent too. No other conditional feature is used, so any S3 that honours
``If-None-Match`` behaves the same.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from botocore.exceptions import ClientError

from session_store.backend import ItemExists
from session_store.backends.aws import TRANSIENT, error_code, open_client, translate
from session_store.clock import ServerClock

_ERRORS: tuple[type[Exception], ...] = (ClientError, *TRANSIENT)

_PARALLEL_GETS = 32
_CONFLICT_RETRIES = 5


class S3Backend:
    max_item_bytes = 64 * 1024 * 1024

    def __init__(
        self,
        client: Any,
        stack: AsyncExitStack,
        *,
        bucket: str,
        prefix: str,
        clock: ServerClock | None = None,
    ) -> None:
        self._client = client
        self._stack = stack
        self._bucket = bucket
        self._base = f"{prefix}/" if prefix else ""
        self.description = f"S3 bucket {bucket!r}" + (f" (prefix {prefix!r})" if prefix else "")
        self._gets = asyncio.Semaphore(_PARALLEL_GETS)
        #: the store's clock: the server's, from its responses (``session_store.clock``)
        self.clock = clock or ServerClock()
        self.clock.bind(self.check)

    @classmethod
    async def connect(
        cls, *, bucket: str, prefix: str, endpoint_url: str | None, region: str | None
    ) -> S3Backend:
        stack = AsyncExitStack()
        clock = ServerClock()
        client = await open_client(
            "s3", stack, endpoint_url=endpoint_url, region=region, clock=clock
        )
        return cls(client, stack, bucket=bucket, prefix=prefix, clock=clock)

    async def create(self, partition: str, item: str, value: bytes) -> None:
        key = self._key(partition, item)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                await self._client.put_object(
                    Bucket=self._bucket, Key=key, Body=value, IfNoneMatch="*"
                )
                return
            except ClientError as error:
                code = error_code(error)
                if code == "PreconditionFailed":
                    raise ItemExists from None
                if code != "ConditionalRequestConflict" or attempt == _CONFLICT_RETRIES - 1:
                    translate(error, self.description)
                # A concurrent conditional write to this key is in flight; the next
                # attempt will see it either created (412) or abandoned.
                await asyncio.sleep(0.02 * 2**attempt)
            except TRANSIENT as error:
                translate(error, self.description)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        try:
            await self._client.put_object(
                Bucket=self._bucket, Key=self._key(partition, item), Body=value
            )
        except _ERRORS as error:
            translate(error, self.description)

    async def get(self, partition: str, item: str) -> bytes | None:
        return await self._get_key(self._key(partition, item))

    async def delete(self, partition: str, item: str) -> None:
        try:
            await self._client.delete_object(Bucket=self._bucket, Key=self._key(partition, item))
        except _ERRORS as error:
            translate(error, self.description)

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        names = await self.keys(partition, after=after)
        if limit is not None:
            names = names[:limit]
        values = await asyncio.gather(*(self.get(partition, name) for name in names))
        # An object listed a moment ago may have been pruned since; skip it.
        return [
            (name, value) for name, value in zip(names, values, strict=True) if value is not None
        ]

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        prefix = f"{self._base}{partition}/"
        arguments: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix}
        if after:
            arguments["StartAfter"] = prefix + after
        names: list[str] = []
        try:
            async for page in self._client.get_paginator("list_objects_v2").paginate(**arguments):
                for entry in page.get("Contents", ()):
                    name = entry["Key"][len(prefix) :]
                    if "/" not in name:  # deeper keys belong to another partition
                        names.append(name)
        except _ERRORS as error:
            translate(error, self.description)
        return names

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        for _ in range(3):
            names = await self.keys(partition)
            if not names:
                return None
            value = await self.get(partition, names[-1])
            if value is not None:
                return names[-1], value
        return None

    async def ensure(self) -> None:
        """Create the bucket unless it exists. AWS answers the losers of concurrent
        creates ``OperationAborted`` (409): tried again, backing off, a few times."""
        for attempt in range(_CONFLICT_RETRIES):
            try:
                await self._client.create_bucket(Bucket=self._bucket)
                return
            except ClientError as error:
                code = error_code(error)
                if code in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                    return
                if code != "OperationAborted" or attempt == _CONFLICT_RETRIES - 1:
                    translate(error, self.description)
            except TRANSIENT as error:
                translate(error, self.description)
            await asyncio.sleep(0.1 * 2**attempt)

    async def check(self) -> None:
        try:
            await self._client.head_bucket(Bucket=self._bucket)
        except ClientError as error:
            if error_code(error) in {"404", "NoSuchBucket", "NotFound"}:
                error.response["Error"]["Code"] = "NoSuchBucket"
            translate(error, self.description)
        except TRANSIENT as error:
            translate(error, self.description)

    async def close(self) -> None:
        await self._stack.aclose()

    def _key(self, partition: str, item: str) -> str:
        return f"{self._base}{partition}/{item}"

    async def _get_key(self, key: str) -> bytes | None:
        async with self._gets:
            try:
                response = await self._client.get_object(Bucket=self._bucket, Key=key)
                async with response["Body"] as body:
                    data: bytes = await body.read()
                    return data
            except ClientError as error:
                if error_code(error) in {"NoSuchKey", "404"}:
                    return None
                translate(error, self.description)
            except TRANSIENT as error:
                translate(error, self.description)
