"""Ids are checked at every door (issue 31, finding 10): the wire models of the bus,
the store's key layout and one shared check say the same thing, with a short message
however long the id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contracts import InvalidInput
from contracts.model import check_id, refusal_of
from contracts.tool import Cancellation, Dispatch, ResultEvent
from session_store import open_store

BAD = {
    "traversal": "../../etc/passwd",
    "10kB": "x" * 10_000,
    "empty": "",
    "dash": "-leading-dash",
    "space": "op 1",
    "slash": "op/1",
    "newline": "op-1\n",
    "accent": "é",
}
BAD_IDS = pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
GOOD_IDS = ("op-forged", "h-3f2a", "op-" + "a" * 40, "acme:s1", "root.r1.c0", "x" * 200)


def dispatch(**fields: Any) -> dict[str, Any]:
    return {
        "operation_id": "op-1",
        "session_id": "s1",
        "task_id": "t1",
        "tool": "act",
        "tool_version": 1,
        **fields,
    }


@BAD_IDS
@pytest.mark.parametrize("field", ["operation_id", "session_id", "task_id"])
def test_a_dispatch_with_a_malformed_id_does_not_validate(field: str, bad: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Dispatch.model_validate_json(json.dumps(dispatch(**{field: bad})))
    reason, detail = refusal_of(refused.value)
    assert reason == "invalid_id" and field in detail
    assert len(detail) < 200, "the detail never carries the whole id"


@BAD_IDS
def test_cancellations_and_result_events_refuse_malformed_ids(bad: str) -> None:
    for model, fields in (
        (Cancellation, {"operation_id": bad, "session_id": "s1"}),
        (Cancellation, {"operation_id": "op-1", "session_id": bad}),
        (ResultEvent, {"operation_id": bad, "session_id": "s1", "succeeded": True}),
        (ResultEvent, {"operation_id": "op-1", "session_id": bad, "succeeded": True}),
    ):
        with pytest.raises(ValidationError) as refused:
            model.model_validate_json(json.dumps(fields))
        assert refusal_of(refused.value)[0] == "invalid_id"


@pytest.mark.parametrize("good", GOOD_IDS, ids=range(len(GOOD_IDS)))
def test_every_id_form_in_use_still_validates(good: str) -> None:
    assert Dispatch.model_validate(dispatch(operation_id=good)).operation_id == good
    assert check_id(good, "operation id") == good


def test_a_message_of_another_shape_is_malformed_not_an_id_problem() -> None:
    without_session = {k: v for k, v in dispatch().items() if k != "session_id"}
    for data in (
        b"not json",
        b"[]",
        json.dumps(dispatch(tool_version=0)).encode(),
        json.dumps(without_session).encode(),
    ):
        with pytest.raises(ValidationError) as refused:
            Dispatch.model_validate_json(data)
        assert refusal_of(refused.value)[0] == "malformed"


@BAD_IDS
def test_check_id_says_what_is_allowed_with_a_short_excerpt(bad: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_id(bad, "operation id")
    message = refused.value.message
    assert message.startswith("operation id ") and "A-Z a-z 0-9 . _ : @ -" in message
    assert len(message) < 300 and len(json.dumps(refused.value.details)) < 200


@BAD_IDS
async def test_the_store_makes_no_key_of_a_malformed_id(bad: str, tmp_path: Path) -> None:
    """Defence in depth (``session_store.layout``): whichever door forgot to check, no
    backend key is made of a malformed id — the store refuses it, naming it briefly."""
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        for read in (
            store.get_operation,
            store.get_operation_result,
            store.get_output_preview,
            store.list_operations,
            store.session,
        ):
            with pytest.raises(InvalidInput) as refused:
                await read(bad)
            assert len(refused.value.message) < 300
    finally:
        await store.close()
