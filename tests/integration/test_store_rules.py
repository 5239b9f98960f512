"""Store rules that hold on every backend: limits known at open, landed commits that
return, what unfenced writers may write, decisions that move operations out of
`uncertain`, and baselines that may be damaged without harm (issue 6, defects 10, 11,
12 and 14)."""

from __future__ import annotations

import json

import pytest

from contracts import (
    Commit,
    CorruptRecord,
    DocumentPatch,
    DocumentPut,
    Entry,
    EntryKind,
    InvalidInput,
    InvalidTransition,
    Operation,
    OperationStatus,
    OutboxMessage,
    PayloadTooLarge,
)
from session_store import SessionStore, layout
from session_store.baselines import BaselineRecord
from session_store.codec import decode
from tests.support.backends import Counting, IndexOutage
from tests.support.builders import answer, entry, submission, task
from tests.support.stores import StoreLocation

pytestmark = pytest.mark.store


async def test_a_record_limit_above_the_backends_is_refused_at_open(
    location: StoreLocation,
) -> None:
    backend_limit = (await location.open()).backend.max_item_bytes
    with pytest.raises(InvalidInput) as refused:
        await location.open(max_record_bytes=backend_limit + 1)
    assert "max_record_bytes" in refused.value.message
    assert f"{backend_limit:,}" in refused.value.message


async def test_an_oversized_commit_is_payload_too_large_at_the_backends_limit(
    location: StoreLocation,
) -> None:
    backend_limit = (await location.open()).backend.max_item_bytes
    store = await location.open(max_record_bytes=min(backend_limit, 400 * 1024))
    handle = await store.session("s1")
    with pytest.raises(PayloadTooLarge):
        await handle.commit(Commit(entries=(entry("z" * 410 * 1024),)), fence=1)
    assert handle.seq == 0


async def test_a_landed_commit_returns_its_receipt_when_the_index_fails_after_it(
    location: StoreLocation,
) -> None:
    store = await location.open()
    outage = IndexOutage(store.backend)
    flaky = SessionStore(outage, store.settings)
    handle = await flaky.session("s1")
    accepted = submission("r1")
    receipt = await handle.commit(Commit(submissions=(accepted,)), fence=None)
    assert outage.broken and receipt.seq == 1
    finished = await handle.commit(Commit(submissions=(answer(accepted),)), fence=1)
    assert finished.seq == 2, "the sweep after a finishing commit failed; the commit stands"
    assert (await (await location.open()).session("s1")).seq == 2


def _user(text: str) -> Entry:
    return Entry(id=f"in.{text}", kind=EntryKind.USER_INPUT, content=text)


async def test_unfenced_writers_may_only_submit_and_ask_for_control(
    location: StoreLocation,
) -> None:
    store = await location.open()
    handle = await store.session("s1")
    accepted = submission("r1")
    control = DocumentPatch(name="control", patch={"cancel_requests": {"r1": "x"}}, create=True)
    await handle.commit(Commit(submissions=(accepted,), entries=(_user("hi"),)), fence=None)
    await handle.commit(Commit(documents=(control,)), fence=None)
    refused = [
        Commit(tasks=(task(),)),
        Commit(entries=(entry("a note"),)),
        Commit(submissions=(answer(accepted),)),
        Commit(documents=(DocumentPut(name="control", body={}),)),
        Commit(documents=(DocumentPatch(name="plan", patch={"a": 1}, create=True),)),
        Commit(outbox=(OutboxMessage(id="m1", topic="tools.dispatch"),)),
        Commit(applied_operations=("op-1",)),
    ]
    for commit in refused:
        with pytest.raises(InvalidInput) as raised:
            await handle.commit(commit, fence=None)
        assert "unfenced" in raised.value.message
    assert handle.seq == 2 and (await (await location.open()).session("s1")).seq == 2


async def test_leaving_uncertain_needs_a_recorded_decision(location: StoreLocation) -> None:
    store = await location.open()
    parked = await store.create_operation(
        Operation(
            operation_id="op-1",
            session_id="s1",
            task_id="t1",
            tool="charge",
            status=OperationStatus.UNCERTAIN,
            reason="reply lost",
        )
    )
    with pytest.raises(InvalidTransition) as refused:
        await store.transition_operation(parked, OperationStatus.RUNNING)
    assert "decision" in refused.value.message
    decided = await store.transition_operation(
        parked,
        OperationStatus.RUNNING,
        decided_by="ops@example.com",
        decision="the provider has no charge for this id; run it",
    )
    assert decided.decided_by == "ops@example.com" and decided.decision is not None
    assert (await store.get_operation("op-1")) == decided


async def _history(handle_store: SessionStore, commits: int) -> None:
    handle = await handle_store.session("s1")
    for n in range(commits):
        await handle.commit(Commit(entries=(entry(n),), tasks=(task(f"t{n}"),)), fence=1)


async def test_an_unreadable_baseline_record_is_skipped_and_reported(
    location: StoreLocation,
) -> None:
    store = await location.open(baseline_every=1000)
    await _history(store, 5)
    handle = await store.session("s1")
    assert await handle.write_baseline() == 5
    await handle.commit(Commit(entries=(entry("after"),)), fence=1)
    bad = layout.seq_item(5)
    await store.backend.put(layout.baseline_partition("s1"), bad, b'{"v":1,"type":"basel')

    loaded = await (await location.open(baseline_every=1000)).session("s1")
    assert loaded.seq == 6 and loaded.state.tasks == handle.state.tasks
    assert [e.content for e in await loaded.entries()] == [0, 1, 2, 3, 4, "after"]
    assert any(bad in problem for problem in loaded.problems), loaded.problems

    await loaded.commit(Commit(entries=(entry("later"),)), fence=1)
    await loaded.write_baseline()
    superseded = await (await location.open(baseline_every=1000)).session("s1")
    assert superseded.problems == () and superseded.seq == 7


async def test_a_torn_baseline_blob_is_skipped_and_reported(location: StoreLocation) -> None:
    store = await location.open(baseline_every=1000, baseline_inline_bytes=0)
    await _history(store, 4)
    handle = await store.session("s1")
    await handle.write_baseline()
    found = await store.backend.last(layout.baseline_partition("s1"))
    assert found is not None
    state = decode(found[1], BaselineRecord, where="baseline").state
    assert state is not None
    chunk = layout.chunk_item(state.chunk_bytes, 0)
    whole = await store.backend.get(layout.blob_partition(state.digest), chunk)
    assert whole is not None
    await store.backend.put(layout.blob_partition(state.digest), chunk, whole[: len(whole) // 2])

    loaded = await (await location.open(baseline_every=1000, baseline_inline_bytes=0)).session("s1")
    assert loaded.seq == 4 and loaded.state.tasks == handle.state.tasks
    assert any(state.digest in problem for problem in loaded.problems), loaded.problems


async def test_a_corrupt_commit_record_still_fails_loudly(location: StoreLocation) -> None:
    # Falling back from a bad baseline to the log must not hide a bad log.
    store = await location.open(baseline_every=1000)
    await _history(store, 3)
    await (await store.session("s1")).write_baseline()
    await store.backend.put(layout.baseline_partition("s1"), layout.seq_item(3), b"{torn")
    await store.backend.put(layout.log_partition("s1"), layout.seq_item(2), b"{torn")
    with pytest.raises(CorruptRecord) as raised:
        await (await location.open(baseline_every=1000)).session("s1")
    assert f"session/s1/log/{layout.seq_item(2)}" in raised.value.message


async def test_a_lost_segment_blob_is_read_from_the_log_and_rewritten(
    location: StoreLocation,
) -> None:
    store = await location.open(baseline_every=1000)
    await _history(store, 6)
    handle = await store.session("s1")
    await handle.write_baseline()
    assert handle.state.entries_archived == 6
    ((_, data),) = await store.backend.items(layout.segment_partition("s1"))
    blob = json.loads(data)["blob"]
    chunk = layout.chunk_item(blob["chunk_bytes"], 0)
    await store.backend.delete(layout.blob_partition(blob["digest"]), chunk)

    loaded = await (await location.open(baseline_every=1000)).session("s1")
    assert [e.content for e in await loaded.entries()] == [0, 1, 2, 3, 4, 5]
    assert await store.backend.get(layout.blob_partition(blob["digest"]), chunk), "rewritten"


async def test_a_writer_behind_on_baselines_skips_the_segments_others_archived(
    location: StoreLocation,
) -> None:
    """Eight writers of one session: a writer's own ``entries_archived`` moves only with
    its own baselines, so its next baseline walked every segment the others archived
    since — a create that fails and a read, per segment — and baselines begun from one
    stale point piled up (S3: 143 requests per baseline, 27.6 per commit, against 7 and
    8.1 before segments; ``bench.store_requests``). It now starts at the newest segment:
    a listing and a read, whatever the others did; the entries read back whole."""
    base = await location.open(baseline_every=1000)
    counted = Counting(base.backend)
    behind = SessionStore(counted, base.settings)
    await _history(behind, 3)
    stale = await behind.session("s1")
    ahead = await location.open(baseline_every=1000)
    writer = await ahead.session("s1")
    for round_ in range(12):
        for n in range(3):
            await writer.commit(Commit(entries=(entry(f"{round_}.{n}"),)), fence=1)
        await writer.write_baseline()
    await stale.refresh()
    assert stale.state.entries_archived == 0
    counted.calls = 0
    await stale.write_baseline()

    segments = await base.backend.keys(layout.segment_partition("s1"))
    assert stale.state.entries_archived == 3 + 12 * 3 and stale.state.entries_tail == []
    assert counted.calls <= 12, f"{counted.calls} calls past {len(segments)} segments"
    fresh = await (await location.open()).session("s1")
    contents = [e.content for e in await fresh.entries()]
    assert contents == [0, 1, 2, *(f"{r}.{n}" for r in range(12) for n in range(3))]


async def test_a_newest_segment_past_a_writers_snapshot_leaves_the_rest_of_its_tail_live(
    location: StoreLocation,
) -> None:
    """The newest segment starts inside this writer's tail but holds entries it has not
    seen: the entries from its start stay live here (a segment covers them once this
    writer has seen them all); and one starting past the tail leaves the walk as it was."""
    store = await location.open(baseline_every=1000)
    await _history(store, 3)
    stale = await store.session("s1")
    writer = await (await location.open(baseline_every=1000)).session("s1")
    for n in range(5):
        await writer.commit(Commit(entries=(entry(f"a{n}"),)), fence=1)
        if n == 2:
            await writer.write_baseline()  # segment 0: entries 0..5
            await stale.refresh()  # this writer sees entries 0..5, then 6 and 7
    await stale.refresh()
    await writer.write_baseline()  # segment 6: entries 6..7
    await writer.commit(Commit(entries=(entry("a5"),)), fence=1)
    await writer.write_baseline()  # segment 8: entry 8, past what stale has seen
    before = len(stale.state.entries_tail)

    await stale.write_baseline()

    assert before == 8
    assert (stale.state.entries_archived, len(stale.state.entries_tail)) == (8, 0)
    fresh = await (await location.open()).session("s1")
    assert [e.content for e in await fresh.entries()] == [0, 1, 2, *(f"a{n}" for n in range(6))]


async def test_a_newest_segment_longer_than_what_a_writer_saw_keeps_that_part_live(
    location: StoreLocation,
) -> None:
    store = await location.open(baseline_every=1000)
    await _history(store, 3)
    stale = await store.session("s1")
    writer = await (await location.open(baseline_every=1000)).session("s1")
    for n in range(3):
        await writer.commit(Commit(entries=(entry(f"a{n}"),)), fence=1)
    await writer.write_baseline()  # segment 0: entries 0..5
    await writer.commit(Commit(entries=(entry("a3"),)), fence=1)
    await stale.refresh()  # this writer sees entries 0..6
    for n in (4, 5):
        await writer.commit(Commit(entries=(entry(f"a{n}"),)), fence=1)
    await writer.write_baseline()  # segment 6: entries 6..8, two of them unseen here

    await stale.write_baseline()

    assert stale.state.entries_archived == 6
    assert [e.content for e in stale.state.entries_tail] == ["a3"]
    fresh = await (await location.open()).session("s1")
    assert [e.content for e in await fresh.entries()] == [0, 1, 2, *(f"a{n}" for n in range(6))]
