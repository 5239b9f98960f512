"""The ``langgraph`` document: a thread's live head per namespace, as pure patch builders.

A LangGraph thread is a session. Its checkpoints are immutable records (blobs, linked
child to parent); the document holds only what is live, so a session's state stays
bounded however long the graph runs (invariant 12)::

    {"generation": 1,
     "ns": {"<ns key>": {"ns": "<checkpoint_ns>",
                         "head": {"id", "ref", "depth", "step", "source"},
                         "tips": {"<checkpoint id>": <BlobRef>},      # branch leaves
                         "writes": {"<checkpoint id>": {"<task>.<idx>": <write>}}}}}

``head`` is the newest checkpoint in log order (never the largest id: ids are
wall-clock uuid6, and no clock is shared between Brains). ``tips`` are the leaves of
the namespace's tree (more than one after time travel or parentless puts): every record
is reachable from them. ``writes`` are pending writes not yet sealed into a child
record. Every function here returns an RFC 7396 merge patch (``None`` deletes a member)
built from the body it is given; the caller commits it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.checkpoint.base import writes_sort_key

#: the document's name in the session
DOCUMENT = "langgraph"

JsonObject = dict[str, Any]


def ns_key(ns: str) -> str:
    """The document member of a checkpoint namespace: a plain identifier whatever the
    namespace holds (subgraph namespaces carry ``|`` and ``:``)."""
    if ns == "":
        return "root"
    return "ns-" + hashlib.sha256(ns.encode()).hexdigest()[:24]


def namespaces(body: Mapping[str, Any]) -> dict[str, JsonObject]:
    """The live namespaces of a document body, by their member key."""
    found: dict[str, JsonObject] = body.get("ns") or {}
    return found


def namespace(body: Mapping[str, Any], ns: str) -> JsonObject | None:
    return namespaces(body).get(ns_key(ns))


def write_key(task_id: str, idx: int) -> str:
    """A pending write's key: one per (task, index), as every LangGraph saver keys them."""
    return f"{task_id}.{idx}"


def is_special(write: Mapping[str, Any]) -> bool:
    """Special writes (error, interrupt, resume, scheduled) have a fixed negative index
    and replace an earlier one; regular writes are kept as first written."""
    idx: int = write["idx"]
    return idx < 0


def put_patch(
    body: Mapping[str, Any],
    ns: str,
    *,
    head: JsonObject,
    parent_id: str | None,
) -> JsonObject:
    """The patch that makes ``head`` (a new record) the namespace's head and a tip.

    Its parent stops being a tip, and the parent's pending writes leave the document:
    the caller sealed them into the new record.
    """
    current = namespace(body, ns) or {}
    tips: JsonObject = {head["id"]: head["ref"]}
    member: JsonObject = {"ns": ns, "head": head, "tips": tips}
    if parent_id is not None and parent_id in (current.get("tips") or {}):
        tips[parent_id] = None
    if parent_id is not None and parent_id in (current.get("writes") or {}):
        member["writes"] = {parent_id: None}
    patch: JsonObject = {"ns": {ns_key(ns): member}}
    if "generation" not in body:
        patch["generation"] = 1
    return patch


def writes_patch(
    body: Mapping[str, Any], ns: str, checkpoint_id: str, writes: Mapping[str, JsonObject]
) -> JsonObject | None:
    """The patch adding ``writes`` (by ``write_key``) to a checkpoint's pending writes,
    or ``None`` when every one of them is already there.

    A regular write whose key exists is kept as it is (a task's writes are saved again
    when a step is retried); a special one replaces the stored one.
    """
    stored = pending(body, ns, checkpoint_id)
    fresh = {key: write for key, write in writes.items() if key not in stored or is_special(write)}
    if not fresh:
        return None
    patch: JsonObject = {"ns": {ns_key(ns): {"ns": ns, "writes": {checkpoint_id: fresh}}}}
    if "generation" not in body:
        patch["generation"] = 1
    return patch


def pending(body: Mapping[str, Any], ns: str, checkpoint_id: str) -> dict[str, JsonObject]:
    """The pending writes the document holds for a checkpoint, by key."""
    current = namespace(body, ns) or {}
    found: dict[str, JsonObject] = (current.get("writes") or {}).get(checkpoint_id) or {}
    return found


def deleted_body(body: Mapping[str, Any]) -> JsonObject:
    """The body after the thread is deleted: nothing live, a new generation."""
    generation: int = body.get("generation", 0)
    return {"generation": generation + 1, "ns": {}}


def merged(
    older: Mapping[str, JsonObject], newer: Mapping[str, JsonObject]
) -> dict[str, JsonObject]:
    """Two sets of one checkpoint's writes as one, by the same rule as ``writes_patch``."""
    found = dict(older)
    for key, write in newer.items():
        if key not in found or is_special(write):
            found[key] = write
    return found


def ordered(writes: Iterable[JsonObject]) -> list[JsonObject]:
    """Writes in the order LangGraph applies a step's tasks (``writes_sort_key``)."""
    return sorted(writes, key=lambda w: writes_sort_key(w["path"], w["task"], w["idx"]))
