"""Checkpoint records and values (adapters/langgraph/record.py): what stays inline, what
becomes a blob, and records that do not decode."""

from __future__ import annotations

import hashlib

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from adapters.langgraph.record import (
    INLINE_BYTES,
    Record,
    decode_record,
    decode_value,
    encode_record,
    encode_value,
)
from contracts import BlobRef, CorruptRecord

SERDE = JsonPlusSerializer()


class Blobs:
    """Blobs in a dict, for the pure encoders (the store's are tested on every backend)."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}

    async def put(self, data: bytes, media_type: str) -> BlobRef:
        digest = hashlib.sha256(data).hexdigest()
        self.kept[digest] = data
        return BlobRef(digest=digest, size=len(data), media_type=media_type, chunk_bytes=1024)

    async def get(self, ref: BlobRef) -> bytes:
        return self.kept[ref.digest]


async def test_small_values_stay_inline_and_large_ones_become_blobs() -> None:
    blobs = Blobs()
    small = await encode_value({"n": 1}, SERDE, blobs.put)
    large = await encode_value("x" * (INLINE_BYTES + 1), SERDE, blobs.put)
    assert "data" in small and "ref" not in small
    assert "ref" in large and len(blobs.kept) == 1
    assert large["ref"]["media_type"] == f"application/x-langgraph-{large['type']}"
    assert await decode_value(small, SERDE, blobs.get) == {"n": 1}
    assert await decode_value(large, SERDE, blobs.get) == "x" * (INLINE_BYTES + 1)


def record() -> Record:
    return Record(
        id="c2",
        ns="",
        depth=2,
        parent_id="c1",
        parent_ref=None,
        checkpoint={"v": 1, "id": "c2", "channel_versions": {"a": 1}},
        metadata={"step": 1, "source": "loop"},
        channels={"a": {"version": 1, "type": "msgpack", "data": "kQ=="}},
        parent_writes={"t.0": {"task": "t", "idx": 0}},
    )


def ref_for(data: bytes, media_type: str) -> BlobRef:
    digest = hashlib.sha256(data).hexdigest()
    return BlobRef(digest=digest, size=len(data), media_type=media_type, chunk_bytes=1024)


def test_a_record_round_trips() -> None:
    data, media_type = encode_record(record(), SERDE)
    assert decode_record(data, ref_for(data, media_type), SERDE) == record()


def test_a_blob_that_is_no_record_is_a_corrupt_record() -> None:
    garbage = b"\xc1 not msgpack"
    with pytest.raises(CorruptRecord, match="does not decode"):
        decode_record(garbage, ref_for(garbage, "application/x-langgraph-msgpack"), SERDE)
    with pytest.raises(CorruptRecord, match="not a LangGraph checkpoint record"):
        decode_record(garbage, ref_for(garbage, "application/octet-stream"), SERDE)
    kind, other = SERDE.dumps_typed({"v": 2})
    with pytest.raises(CorruptRecord, match="no checkpoint record of version 1"):
        decode_record(other, ref_for(other, f"application/x-langgraph-{kind}"), SERDE)
