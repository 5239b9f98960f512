"""The ``langgraph`` document's patch builders (adapters/langgraph/thread.py), applied
with the store's own RFC 7396 merge: heads, tips, pending writes and their keys."""

from __future__ import annotations

import re
from typing import Any

from adapters.langgraph import thread
from contracts.model import IDENTIFIER_PATTERN
from session_store.state import merge_patch

REF = {"digest": "0" * 64, "size": 1, "media_type": "x", "chunk_bytes": 1}


def head(checkpoint_id: str, depth: int = 1) -> dict[str, Any]:
    return {"id": checkpoint_id, "ref": {**REF, "size": depth}, "depth": depth}


def write(
    task: str, idx: int, channel: str = "c", path: str = "", data: str = ""
) -> dict[str, Any]:
    return {"task": task, "path": path, "idx": idx, "channel": channel, "type": "t", "data": data}


def put(body: dict[str, Any], ns: str, checkpoint_id: str, parent: str | None) -> dict[str, Any]:
    depth = 1 if parent is None else 2
    patch = thread.put_patch(body, ns, head=head(checkpoint_id, depth), parent_id=parent)
    result: dict[str, Any] = merge_patch(body, patch)
    return result


def add_writes(body: dict[str, Any], checkpoint_id: str, *writes: dict[str, Any]) -> dict[str, Any]:
    keyed = {thread.write_key(w["task"], w["idx"]): w for w in writes}
    patch = thread.writes_patch(body, "", checkpoint_id, keyed)
    return body if patch is None else merge_patch(body, patch)


def test_namespace_keys_are_identifiers_whatever_the_namespace_holds() -> None:
    assert thread.ns_key("") == "root"
    key = thread.ns_key("agent:5f1c|tools:9a2b")
    assert re.match(IDENTIFIER_PATTERN, key) and key != thread.ns_key("agent:5f1c")


def test_the_first_put_creates_the_document_with_its_head_as_the_only_tip() -> None:
    body = put({}, "", "c1", None)
    root = body["ns"]["root"]
    assert body["generation"] == 1
    assert root["head"]["id"] == "c1" and list(root["tips"]) == ["c1"]


def test_a_child_replaces_its_parent_as_tip_and_seals_only_the_parents_writes() -> None:
    body = put({}, "", "c1", None)
    body = add_writes(body, "c1", write("t1", 0))
    body = add_writes(body, "c0", write("t9", 0))  # a checkpoint with no child yet
    body = put(body, "", "c2", "c1")
    root = body["ns"]["root"]
    assert root["head"]["id"] == "c2" and list(root["tips"]) == ["c2"]
    assert set(root["writes"]) == {"c0"}  # c1's writes left with the put (into c2's record)


def test_a_put_from_an_older_checkpoint_starts_a_branch_and_keeps_the_other_tip() -> None:
    body = put(put({}, "", "c1", None), "", "c2", "c1")
    body = put(body, "", "c3", "c1")  # time travel: c1 is not a tip any more
    root = body["ns"]["root"]
    assert root["head"]["id"] == "c3" and set(root["tips"]) == {"c2", "c3"}


def test_parentless_puts_are_each_a_tip() -> None:
    body = put(put({}, "", "a", None), "", "b", None)
    assert set(body["ns"]["root"]["tips"]) == {"a", "b"}


def test_namespaces_are_kept_apart() -> None:
    body = put(put({}, "", "c1", None), "child:1", "s1", None)
    assert thread.namespace(body, "")["head"]["id"] == "c1"  # type: ignore[index]
    assert thread.namespace(body, "child:1")["head"]["id"] == "s1"  # type: ignore[index]
    assert thread.namespace(body, "child:1")["ns"] == "child:1"  # type: ignore[index]


def test_a_regular_write_is_kept_as_first_written_and_a_special_one_replaced() -> None:
    body = add_writes({}, "c1", write("t", 0, data="first"), write("t", -3, data="first"))
    again = {
        thread.write_key("t", 0): write("t", 0, data="second"),
        thread.write_key("t", -3): write("t", -3, data="second"),
    }
    body = merge_patch(body, thread.writes_patch(body, "", "c1", again))
    stored = thread.pending(body, "", "c1")
    assert stored["t.0"]["data"] == "first" and stored["t.-3"]["data"] == "second"


def test_writes_already_stored_make_no_patch() -> None:
    body = add_writes({}, "c1", write("t", 0))
    assert thread.writes_patch(body, "", "c1", {"t.0": write("t", 0, data="x")}) is None


def test_writes_for_a_namespace_before_its_first_put_create_it() -> None:
    body = add_writes({}, "c1", write("t", 0))
    assert body["generation"] == 1 and "head" not in body["ns"]["root"]


def test_merged_writes_follow_the_same_rule() -> None:
    older = {"t.0": write("t", 0, data="old"), "t.-1": write("t", -1, data="old")}
    newer = {"t.0": write("t", 0, data="new"), "t.-1": write("t", -1, data="new")}
    both = thread.merged(older, newer)
    assert both["t.0"]["data"] == "old" and both["t.-1"]["data"] == "new"


def test_writes_are_ordered_by_task_path_then_task_then_index() -> None:
    writes = [write("b", 1, path="~1"), write("a", 0, path="~2"), write("b", 0, path="~1")]
    found = [(w["path"], w["task"], w["idx"]) for w in thread.ordered(writes)]
    assert found == [("~1", "b", 0), ("~1", "b", 1), ("~2", "a", 0)]


def test_delete_leaves_nothing_live_in_a_new_generation() -> None:
    body = put({}, "", "c1", None)
    assert thread.deleted_body(body) == {"generation": 2, "ns": {}}
    assert put(thread.deleted_body(body), "", "c9", None)["generation"] == 2
