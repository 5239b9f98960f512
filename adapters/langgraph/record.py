"""Checkpoint records and serialized values: what is a blob and what stays inline.

A record is one checkpoint, immutable, stored as a blob (so commits stay small) and
encoded with the saver's serializer, so every LangGraph type round-trips. It holds the
checkpoint without its channel values, its metadata, its namespace, its parent's id and
blob (a hash-linked chain), its depth, one entry per channel (a value inline when small,
a blob ref when large, or ``empty``), and its parent's pending writes, sealed when this
record was put.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from contracts import BlobRef, CorruptRecord

JsonObject = dict[str, Any]

#: values up to this size stay in the record or the document; larger ones become blobs
INLINE_BYTES = 2048

PutBlob = Callable[[bytes, str], Awaitable[BlobRef]]
GetBlob = Callable[[BlobRef], Awaitable[bytes]]


@dataclass(frozen=True)
class Record:
    """One checkpoint as stored."""

    id: str
    ns: str
    depth: int
    parent_id: str | None
    parent_ref: JsonObject | None
    checkpoint: JsonObject  # without channel_values
    metadata: JsonObject
    channels: dict[str, JsonObject]  # name -> {"version", and "empty" | "type" + "data"/"ref"}
    parent_writes: dict[str, JsonObject] = field(default_factory=dict)


def media_type(serialized_type: str) -> str:
    return f"application/x-langgraph-{serialized_type}"


def ref_json(ref: BlobRef) -> JsonObject:
    return ref.model_dump(mode="json")


def ref_of(data: JsonObject) -> BlobRef:
    return BlobRef.model_validate(data)


async def encode_value(value: Any, serde: SerializerProtocol, put_blob: PutBlob) -> JsonObject:
    """A value as JSON: its serialized type and bytes (base64) inline, or a blob ref."""
    kind, data = serde.dumps_typed(value)
    if len(data) <= INLINE_BYTES:
        return {"type": kind, "data": base64.b64encode(data).decode()}
    return {"type": kind, "ref": ref_json(await put_blob(data, media_type(kind)))}


async def decode_value(stored: JsonObject, serde: SerializerProtocol, get_blob: GetBlob) -> Any:
    if "ref" in stored:
        data = await get_blob(ref_of(stored["ref"]))
    else:
        data = base64.b64decode(stored["data"])
    return serde.loads_typed((stored["type"], data))


def encode_record(record: Record, serde: SerializerProtocol) -> tuple[bytes, str]:
    """The record's bytes and the media type that names its serialized type."""
    kind, data = serde.dumps_typed(
        {
            "v": 1,
            "id": record.id,
            "ns": record.ns,
            "depth": record.depth,
            "parent_id": record.parent_id,
            "parent_ref": record.parent_ref,
            "checkpoint": record.checkpoint,
            "metadata": record.metadata,
            "channels": record.channels,
            "parent_writes": record.parent_writes,
        }
    )
    return data, media_type(kind)


def decode_record(data: bytes, ref: BlobRef, serde: SerializerProtocol) -> Record:
    prefix = media_type("")
    if not ref.media_type.startswith(prefix):
        raise CorruptRecord(
            f"blob {ref.digest} is not a LangGraph checkpoint record ({ref.media_type})",
            digest=ref.digest,
        )
    try:
        body = serde.loads_typed((ref.media_type.removeprefix(prefix), data))
    except Exception as error:  # the serializer's own errors (msgpack, json, crypto)
        raise CorruptRecord(
            f"blob {ref.digest} does not decode as a checkpoint record: {error}",
            digest=ref.digest,
        ) from error
    if not isinstance(body, dict) or body.get("v") != 1:
        raise CorruptRecord(
            f"blob {ref.digest} holds no checkpoint record of version 1", digest=ref.digest
        )
    return Record(
        id=body["id"],
        ns=body["ns"],
        depth=body["depth"],
        parent_id=body["parent_id"],
        parent_ref=body["parent_ref"],
        checkpoint=body["checkpoint"],
        metadata=body["metadata"],
        channels=body["channels"],
        parent_writes=body["parent_writes"],
    )
