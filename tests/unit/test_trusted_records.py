"""``Frozen.trusted`` builds the record ``model_construct`` builds, faster (the store's
commit path builds two a commit): the same fields, the same fields set, the same bytes;
and it hands a class it cannot build that way to ``model_construct``."""

from __future__ import annotations

import os

import pytest
from pydantic import Field, PrivateAttr, ValidationError

from contracts import CommitReceipt, CommitRecord, utcnow
from contracts.model import Frozen
from tests.support.builders import small_commit


def _fields() -> dict[str, object]:
    commit, _ = small_commit(1)
    return {
        "session_id": "s1",
        "seq": 7,
        "commit_id": os.urandom(16).hex(),
        "fence": 3,
        "writer_fence": 3,
        "claim": False,
        "holder": None,
        "writer": "brain-1",
        "commit": commit,
        "committed_at": utcnow(),
    }


def _same(built: Frozen, constructed: Frozen) -> None:
    assert type(built) is type(constructed)
    assert built == constructed
    assert built.model_fields_set == constructed.model_fields_set
    assert built.model_dump_json() == constructed.model_dump_json()
    assert built.model_extra == constructed.model_extra
    assert built.__pydantic_private__ == constructed.__pydantic_private__


def test_a_commit_record_and_its_receipt_are_what_model_construct_makes() -> None:
    fields = _fields()
    _same(CommitRecord.trusted(**fields), CommitRecord.model_construct(**fields))
    receipt = {"session_id": "s1", "seq": 7, "fence": 3, "committed_at": utcnow()}
    _same(CommitReceipt.trusted(**receipt), CommitReceipt.model_construct(**receipt))


def test_a_record_stays_frozen() -> None:
    record = CommitRecord.trusted(**_fields())
    with pytest.raises(ValidationError, match="frozen"):
        record.seq = 8  # type: ignore[misc]


class _Factory(Frozen):
    name: str
    tags: list[str] = Field(default_factory=list)


class _Private(Frozen):
    name: str
    _seen: int = PrivateAttr(default=4)


def test_what_it_cannot_build_goes_through_model_construct() -> None:
    _same(_Factory.trusted(name="a"), _Factory.model_construct(name="a"))
    assert _Factory.trusted(name="a").tags == []
    _same(_Private.trusted(name="a"), _Private.model_construct(name="a"))
    assert _Private.trusted(name="a")._seen == 4
