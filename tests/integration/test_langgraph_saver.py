"""``BrainhandsSaver`` on every backend of the store suite (SQLite, S3 on moto and on
radosgw, DynamoDB on moto): LangGraph's own checkpointer conformance suite, what
brainhands adds on top of it (design notes A6), and a compiled graph resumed by another
process's saver.

LangGraph's suite (``langgraph-checkpoint-conformance==0.0.2``, pinned: it is young)
runs, per capability, on a fresh saver: put (17 tests), put_writes (10), get_tuple (10),
list (16) and delete_thread (5) are required; delete_for_runs, copy_thread and prune are
extended, detected by override, and this saver claims none of them.
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from adapters.langgraph import BrainhandsSaver, SessionJournal
from adapters.langgraph.thread import DOCUMENT
from contracts import Commit, DocumentPatch, FencedError, InvalidInput, StoreUnavailable
from contracts.document import CONTROL_DOCUMENT
from session_store import SessionStore
from tests.support.backends import Counting, Passthrough
from tests.support.stores import SUITE_BACKENDS, StoreLocation, location_fixture

pytestmark = pytest.mark.store

location = location_fixture(SUITE_BACKENDS)  # also on radosgw


@pytest.fixture
async def store(location: StoreLocation) -> SessionStore:
    return await location.open()


def saver_on(store: SessionStore, holder: str = "test") -> BrainhandsSaver:
    return BrainhandsSaver(SessionJournal(store, holder=holder))


def config(thread: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    configurable = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def checkpoint(values: dict[str, Any], checkpoint_id: str | None = None) -> Checkpoint:
    return {
        "v": 1,
        "id": checkpoint_id or str(uuid6(clock_seq=-1)),
        "ts": "2026-12-07T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, 1),
        "versions_seen": {},
        "updated_channels": sorted(values),
    }


async def put(
    saver: BrainhandsSaver,
    thread: str,
    parent: str | None,
    values: dict[str, Any] | None = None,
    *,
    checkpoint_id: str | None = None,
    step: int = 0,
) -> str:
    values = values or {}
    done = await saver.aput(
        config(thread, parent),
        checkpoint(values, checkpoint_id),
        {"source": "loop", "step": step, "parents": {}},
        dict.fromkeys(values, 1),
    )
    found: str = done["configurable"]["checkpoint_id"]
    return found


async def listed(saver: BrainhandsSaver, thread: str, **options: Any) -> list[str]:
    return [t.checkpoint["id"] async for t in saver.alist(config(thread), **options)]


def new_thread() -> str:
    return uuid.uuid4().hex


async def test_langgraphs_conformance_suite_passes(store: SessionStore) -> None:
    @checkpointer_test(name="brainhands")
    async def factory() -> AsyncIterator[BrainhandsSaver]:
        yield saver_on(store, "conformance")

    report = await validate(factory)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    ran = {name: r.tests_passed for name, r in report.results.items() if r.detected}
    assert ran == {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5}


async def test_latest_is_the_head_in_log_order_not_the_largest_id(store: SessionStore) -> None:
    """Another Brain's clock may run behind: its checkpoint ids are smaller. Here the
    newest put (a branch from the first checkpoint) has the smallest id of the three."""
    saver, thread = saver_on(store), new_thread()
    first = await put(saver, thread, None, {"x": 1}, checkpoint_id="1f0aaaa0-0000-6000-8000-0")
    await put(saver, thread, first, {"x": 2}, checkpoint_id="1f0ffff0-0000-6000-8000-0")
    late = await put(saver, thread, first, {"x": 3}, checkpoint_id="1f000000-0000-6000-8000-0")
    found = await saver_on(store, "reader").aget_tuple(config(thread))
    assert found is not None and found.checkpoint["id"] == late
    assert found.checkpoint["channel_values"] == {"x": 3}
    assert found.parent_config == config(thread, first)


async def test_writes_for_a_checkpoint_that_already_has_a_child_are_kept(
    store: SessionStore,
) -> None:
    """LangGraph does not order a task's writes before the next put: late writes for
    a checkpoint that is no longer the head are still its pending writes."""
    saver, thread = saver_on(store), new_thread()
    parent = await put(saver, thread, None, {"x": 1})
    await saver.aput_writes(config(thread, parent), [("x", "early")], "task-a")
    child = await put(saver, thread, parent, {"x": 2})
    await saver.aput_writes(config(thread, parent), [("x", "late")], "task-b")
    again = saver_on(store, "reader")  # nothing cached: read back from the store
    found = await again.aget_tuple(config(thread, parent))
    assert found is not None
    assert found.pending_writes == [("task-a", "x", "early"), ("task-b", "x", "late")]
    head = await again.aget_tuple(config(thread))
    assert head is not None and head.checkpoint["id"] == child and head.pending_writes == []
    listing = [t async for t in again.alist(config(thread))]
    assert [len(t.pending_writes or ()) for t in listing] == [0, 2]


async def test_writes_arriving_in_completion_order_come_back_in_task_order(
    store: SessionStore,
) -> None:
    saver, thread = saver_on(store), new_thread()
    at = config(thread, await put(saver, thread, None, {"x": 1}))
    await saver.aput_writes(at, [("b", 2), ("b", 3)], "task-b", "~__pregel_pull, b")
    await saver.aput_writes(at, [("a", 1)], "task-a", "~__pregel_pull, a")
    await saver.aput_writes(at, [("b", 99)], "task-b", "~__pregel_pull, b")  # a retry: kept
    found = await saver_on(store, "reader").aget_tuple(at)
    assert found is not None
    assert found.pending_writes == [("task-a", "a", 1), ("task-b", "b", 2), ("task-b", "b", 3)]


async def test_a_fenced_out_saver_cannot_move_the_head(
    store: SessionStore, location: StoreLocation
) -> None:
    stale, thread = saver_on(store, "brain-a"), new_thread()
    first = await put(stale, thread, None, {"x": 1})
    newer = saver_on(await location.open(), "brain-b")
    second = await put(newer, thread, first, {"x": 2})  # claims a higher fence
    with pytest.raises(FencedError):
        await put(stale, thread, first, {"x": "stale"})
    with pytest.raises(FencedError):
        await stale.aput_writes(config(thread, second), [("x", "stale")], "task")
    found = await saver_on(await location.open(), "reader").aget_tuple(config(thread))
    assert found is not None and found.checkpoint["id"] == second
    assert found.pending_writes == []


async def test_a_put_after_an_unfenced_writer_took_the_seq_is_rebuilt(
    store: SessionStore, location: StoreLocation
) -> None:
    saver, thread = saver_on(store), new_thread()
    first = await put(saver, thread, None, {"x": 1})
    ingress = await (await location.open()).session(thread)
    cancel = DocumentPatch(name=CONTROL_DOCUMENT, patch={"cancel": True}, create=True)
    await ingress.commit(Commit(documents=(cancel,)), fence=None)
    second = await put(saver, thread, first, {"x": 2})
    reread = await (await location.open()).session(thread)
    assert reread.state.documents[CONTROL_DOCUMENT].body == {"cancel": True}
    assert reread.state.documents[DOCUMENT].body["ns"]["root"]["head"]["id"] == second


async def test_the_document_stays_the_same_size_however_many_steps(store: SessionStore) -> None:
    saver, thread = saver_on(store), new_thread()
    sizes = []
    parent = None
    for step in range(12):
        parent = await put(saver, thread, parent, {"messages": ["m"] * step}, step=step)
        await saver.aput_writes(config(thread, parent), [("messages", ["next"])], f"t{step}")
        journal = SessionJournal(store, holder="reader")
        document = await journal.document(thread, DOCUMENT)
        assert document is not None
        sizes.append(len(json.dumps(document.body)))
    assert max(sizes[2:]) - min(sizes[2:]) <= 8, sizes  # ids and counters, not history


async def test_reading_the_latest_checkpoint_costs_one_record_and_then_nothing(
    store: SessionStore,
) -> None:
    saver, thread = saver_on(store), new_thread()
    parent = None
    for step in range(5):
        parent = await put(saver, thread, parent, {"x": step, "big": "y" * 5000}, step=step)
    counting = Counting(store.backend)
    reader = saver_on(SessionStore(counting, store.settings), "reader")
    await reader.aget_tuple(config(thread))  # loads the session, like a Brain's claim
    assert reader.records.loads == 1
    counting.calls = 0
    found = await reader.aget_tuple(config(thread))
    assert found is not None and found.checkpoint["channel_values"]["x"] == 4
    assert counting.calls == 1  # the large value's blob; the record is cached


class BlobOutage(Passthrough):
    """Blob writes fail while ``broken``; everything else passes through."""

    broken = False

    async def create(self, partition: str, item: str, value: bytes) -> None:
        if self.broken and partition.startswith("blob/"):
            raise StoreUnavailable(f"{self.description}: blobs are unreachable (test fault)")
        await super().create(partition, item, value)


async def test_a_failed_blob_write_leaves_the_head_where_it_was(store: SessionStore) -> None:
    outage = BlobOutage(store.backend)
    saver = saver_on(SessionStore(outage, store.settings))
    thread = new_thread()
    first = await put(saver, thread, None, {"x": 1})
    outage.broken = True
    with pytest.raises(StoreUnavailable):
        await put(saver, thread, first, {"x": "z" * 5000})
    found = await saver_on(store, "reader").aget_tuple(config(thread))
    assert found is not None and found.checkpoint["id"] == first


async def test_a_thread_deleted_then_used_again_starts_afresh(store: SessionStore) -> None:
    saver, thread = saver_on(store), new_thread()
    old = await put(saver, thread, None, {"x": 1})
    await saver.aput_writes(config(thread, old), [("x", 2)], "task")
    await saver.adelete_thread(thread)
    assert await saver.aget_tuple(config(thread)) is None
    new = await put(saver, thread, None, {"x": 3})
    assert await listed(saver_on(store, "reader"), thread) == [new]
    document = await SessionJournal(store, holder="reader").document(thread, DOCUMENT)
    assert document is not None and document.body["generation"] == 2


async def test_time_travel_branches_and_lists_both(store: SessionStore) -> None:
    saver, thread = saver_on(store), new_thread()
    one = await put(saver, thread, None, {"x": 1}, step=1)
    two = await put(saver, thread, one, {"x": 2}, step=2)
    three = await put(saver, thread, two, {"x": 3}, step=3)
    branch = await put(saver, thread, one, {"x": 20}, step=2)  # from an old checkpoint
    reader = saver_on(store, "reader")
    # newest first: deepest, then the larger id (uuid6 ids grow within one process)
    assert await listed(reader, thread) == [three, branch, two, one]
    assert set(await listed(reader, thread, filter={"step": 2})) == {two, branch}
    head = await reader.aget_tuple(config(thread))
    assert head is not None and head.checkpoint["id"] == branch
    old = await reader.aget_tuple(config(thread, three))
    assert old is not None and old.checkpoint["channel_values"] == {"x": 3}
    assert await reader.aget_tuple(config(thread, str(uuid6(clock_seq=-1)))) is None


async def test_a_thread_that_is_not_a_session_id_is_refused(store: SessionStore) -> None:
    with pytest.raises(InvalidInput, match="not a session id"):
        await saver_on(store).aget_tuple(config("no spaces/allowed"))
    with pytest.raises(NotImplementedError, match="async-only"):
        saver_on(store).get_tuple(config(new_thread()))
    with pytest.raises(InvalidInput, match="one thread at a time"):
        [t async for t in saver_on(store).alist(None)]


class Steps(TypedDict):
    log: list[str]


async def test_a_graph_resumes_from_its_last_super_step_with_a_new_saver(
    location: StoreLocation,
) -> None:
    """A two-node graph stops before its second node; the process's saver is dropped,
    and a new one on a newly opened store (another Brain) carries on from there: the
    first node does not run again."""
    ran: list[str] = []

    def node(name: str) -> Any:
        def run(state: Steps) -> dict[str, list[str]]:
            ran.append(name)
            return {"log": [*state["log"], name]}

        return run

    def graph(saver: BrainhandsSaver) -> Any:
        builder = StateGraph(Steps)
        builder.add_node("first", node("first"))
        builder.add_node("second", node("second"))
        builder.add_edge(START, "first")
        builder.add_edge("first", "second")
        builder.add_edge("second", END)
        return builder.compile(checkpointer=saver, interrupt_before=["second"])

    thread = new_thread()
    run = {"configurable": {"thread_id": thread}}
    before = graph(saver_on(await location.open(), "brain-a"))
    await before.ainvoke({"log": []}, run, durability="sync")
    assert ran == ["first"]

    after = graph(saver_on(await location.open(), "brain-b"))
    state = await after.aget_state(run)
    assert state.next == ("second",) and state.values == {"log": ["first"]}
    result = await after.ainvoke(None, run, durability="sync")
    assert result == {"log": ["first", "second"]} and ran == ["first", "second"]
    history = [s.metadata["step"] async for s in after.aget_state_history(run)]
    assert history == [2, 1, 0, -1]


class Items(TypedDict):
    xs: Annotated[list[str], operator.add]


def interrupting_graph(saver: BaseCheckpointSaver[Any], ran: list[str]) -> Any:
    """Two parallel nodes, then a subgraph (its own checkpoint namespace) whose second
    node asks with ``interrupt()``."""

    def node(name: str) -> Any:
        def run(state: Items) -> dict[str, list[str]]:
            ran.append(name)
            return {"xs": [name]}

        return run

    def ask(state: Items) -> dict[str, list[str]]:
        ran.append("ask")
        return {"xs": [f"answer={interrupt({'question': 'send it?'})}"]}

    inner = StateGraph(Items)
    inner.add_node("inner", node("inner"))
    inner.add_node("ask", ask)
    inner.add_edge(START, "inner")
    inner.add_edge("inner", "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(Items)
    outer.add_node("a", node("a"))
    outer.add_node("b", node("b"))
    outer.add_node("sub", inner.compile())
    for name in ("a", "b"):
        outer.add_edge(START, name)
        outer.add_edge(name, "sub")
    outer.add_edge("sub", END)
    return outer.compile(checkpointer=saver)


async def interrupted_and_resumed(first: Any, second: Any) -> dict[str, Any]:
    """Run until the interrupt with ``first``'s saver, answer it with ``second``'s."""
    ran: list[str] = []
    run = {"configurable": {"thread_id": new_thread()}}
    asked = await interrupting_graph(first, ran).ainvoke(
        {"xs": []}, run, durability="sync", version="v2"
    )
    graph = interrupting_graph(second, ran)
    waiting = await graph.aget_state(run, subgraphs=True)
    answer: Command[Any] = Command(resume={asked.interrupts[0].id: "yes"})
    done = await graph.ainvoke(answer, run, durability="sync", version="v2")
    return {
        "asked": (asked.value, [i.value for i in asked.interrupts]),
        "waiting": (waiting.next, [t.name for t in waiting.tasks], waiting.values),
        "done": (done.value, done.interrupts),
        "ran": ran,
        "history": [
            (s.metadata["step"], s.metadata["source"], s.next)
            async for s in graph.aget_state_history(run)
        ],
    }


async def test_an_interrupted_graph_with_a_subgraph_resumes_as_on_langgraphs_own_saver(
    location: StoreLocation,
) -> None:
    """Parallel nodes, a subgraph namespace and an interrupt answered by another
    process's saver: outputs, node runs and history are those of LangGraph's
    ``InMemorySaver`` (the finished parallel nodes and the subgraph's first node do not
    run again; the asking node re-runs on resume, as LangGraph defines)."""
    memory = InMemorySaver()
    expected = await interrupted_and_resumed(memory, memory)
    assert expected["ran"] == ["a", "b", "inner", "ask", "ask"] or expected["ran"] == [
        "b",
        "a",
        "inner",
        "ask",
        "ask",
    ]
    found = await interrupted_and_resumed(
        saver_on(await location.open(), "brain-a"), saver_on(await location.open(), "brain-b")
    )
    assert sorted(found["ran"][:2]) == ["a", "b"] and found["ran"][2:] == expected["ran"][2:]
    found["ran"] = expected["ran"] = None
    assert found == expected
