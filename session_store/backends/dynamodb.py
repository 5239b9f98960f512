"""DynamoDB backend: one item per record, keyed ``(pk = partition, sk = item)``.

A create is ``PutItem`` with ``ConditionExpression="attribute_not_exists(pk)"`` — the same
create-once protocol as S3, so one commit costs one conditional write and needs no
transaction. Reads are strongly consistent (``ConsistentRead=True``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from botocore.exceptions import ClientError

from session_store.backend import ItemExists
from session_store.backends.aws import TRANSIENT, error_code, open_client, translate
from session_store.clock import ServerClock

_ERRORS: tuple[type[Exception], ...] = (ClientError, *TRANSIENT)


class DynamoBackend:
    # DynamoDB items hold at most 400 KB including key names and attribute names.
    max_item_bytes = 380 * 1024

    def __init__(
        self, client: Any, stack: AsyncExitStack, *, table: str, clock: ServerClock | None = None
    ) -> None:
        self._client = client
        self._stack = stack
        self._table = table
        self.description = f"DynamoDB table {table!r}"
        #: the store's clock: the server's, from its responses (``session_store.clock``)
        self.clock = clock or ServerClock()
        self.clock.bind(self.check)

    @classmethod
    async def connect(
        cls, *, table: str, endpoint_url: str | None, region: str | None
    ) -> DynamoBackend:
        stack = AsyncExitStack()
        clock = ServerClock()
        client = await open_client(
            "dynamodb", stack, endpoint_url=endpoint_url, region=region, clock=clock
        )
        return cls(client, stack, table=table, clock=clock)

    async def create(self, partition: str, item: str, value: bytes) -> None:
        try:
            await self._client.put_item(
                TableName=self._table,
                Item=_item(partition, item, value),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                raise ItemExists from None
            translate(error, self.description)
        except _ERRORS as error:
            translate(error, self.description)

    async def put(self, partition: str, item: str, value: bytes) -> None:
        try:
            await self._client.put_item(TableName=self._table, Item=_item(partition, item, value))
        except _ERRORS as error:
            translate(error, self.description)

    async def get(self, partition: str, item: str) -> bytes | None:
        try:
            response = await self._client.get_item(
                TableName=self._table, Key=_key(partition, item), ConsistentRead=True
            )
        except _ERRORS as error:
            translate(error, self.description)
        found = response.get("Item")
        return None if found is None else bytes(found["v"]["B"])

    async def delete(self, partition: str, item: str) -> None:
        try:
            await self._client.delete_item(TableName=self._table, Key=_key(partition, item))
        except _ERRORS as error:
            translate(error, self.description)

    async def items(
        self, partition: str, *, after: str | None = None, limit: int | None = None
    ) -> list[tuple[str, bytes]]:
        rows = await self._query(partition, after=after, limit=limit, values=True)
        return [(row["sk"]["S"], bytes(row["v"]["B"])) for row in rows]

    async def keys(self, partition: str, *, after: str | None = None) -> list[str]:
        rows = await self._query(partition, after=after, limit=None, values=False)
        return [row["sk"]["S"] for row in rows]

    async def last(self, partition: str) -> tuple[str, bytes] | None:
        rows = await self._query(partition, after=None, limit=1, values=True, forward=False)
        return (rows[0]["sk"]["S"], bytes(rows[0]["v"]["B"])) if rows else None

    async def ensure(self) -> None:
        try:
            await self._client.create_table(
                TableName=self._table,
                KeySchema=[
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as error:
            if error_code(error) != "ResourceInUseException":
                translate(error, self.description)
        except _ERRORS as error:
            translate(error, self.description)
        try:
            waiter = self._client.get_waiter("table_exists")
            await waiter.wait(TableName=self._table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        except _ERRORS as error:
            translate(error, self.description)

    async def check(self) -> None:
        try:
            await self._client.describe_table(TableName=self._table)
        except _ERRORS as error:
            translate(error, self.description)

    async def close(self) -> None:
        await self._stack.aclose()

    async def _query(
        self,
        partition: str,
        *,
        after: str | None,
        limit: int | None,
        values: bool,
        forward: bool = True,
    ) -> list[dict[str, Any]]:
        arguments: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "ScanIndexForward": forward,
            "KeyConditionExpression": "pk = :p" + (" AND sk > :a" if after else ""),
            "ExpressionAttributeValues": {":p": {"S": partition}}
            | ({":a": {"S": after}} if after else {}),
        }
        if not values:
            arguments["ProjectionExpression"] = "sk"
        rows: list[dict[str, Any]] = []
        try:
            while True:
                if limit is not None:
                    arguments["Limit"] = limit - len(rows)
                response = await self._client.query(**arguments)
                rows.extend(response.get("Items", ()))
                next_key = response.get("LastEvaluatedKey")
                if not next_key or (limit is not None and len(rows) >= limit):
                    return rows
                arguments["ExclusiveStartKey"] = next_key
        except _ERRORS as error:
            translate(error, self.description)


def _key(partition: str, item: str) -> dict[str, Any]:
    return {"pk": {"S": partition}, "sk": {"S": item}}


def _item(partition: str, item: str, value: bytes) -> dict[str, Any]:
    return {"pk": {"S": partition}, "sk": {"S": item}, "v": {"B": value}}
