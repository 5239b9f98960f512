"""One conformance suite for the Session Store, run against SQLite, S3 (moto and Ceph's
radosgw) and DynamoDB.

Every behaviour a backend must show lives here, bad input included; the backend
parameter comes from the ``location`` fixture (``tests.support.stores.location_fixture``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest

from contracts import (
    AlreadyApplied,
    AlreadyExists,
    BlobRef,
    Commit,
    CommitRecord,
    ConflictError,
    CorruptRecord,
    DocumentPatch,
    DocumentPut,
    FencedError,
    InvalidInput,
    InvalidTransition,
    NotFound,
    Operation,
    OperationResult,
    OperationStatus,
    OutboxMessage,
    PayloadTooLarge,
    ReadOnlyStore,
    ReplayPolicy,
    StoreMissing,
    UnknownRecordVersion,
    VersionMismatch,
)
from contracts.fleet import HandsBeat, QueueBacklog, RunningOperation
from session_store import layout, open_store
from session_store.codec import decode
from session_store.layout import HANDS_PARTITION, quiet_partition
from tests.support.builders import advance, answer, entry, finish, small_commit, submission, task
from tests.support.stores import SUITE_BACKENDS, StoreLocation, location_fixture

pytestmark = pytest.mark.store

location = location_fixture(SUITE_BACKENDS)  # also on radosgw

F = 1  # the fence of "the lease holder" in tests that are not about fencing


# --- commits and loading ------------------------------------------------------------


async def test_commits_get_consecutive_seqs_and_reload_identically(location: StoreLocation) -> None:
    store = await location.open()
    handle = await store.session("s1")
    current = None
    receipts = []
    for n in range(5):
        commit, current = small_commit(n, current)
        receipts.append(await handle.commit(commit, fence=F))
    assert [r.seq for r in receipts] == [1, 2, 3, 4, 5]
    reopened = await (await location.open()).session("s1")
    assert reopened.seq == 5
    assert reopened.state.tasks == handle.state.tasks
    assert [e.content for e in await reopened.entries()] == [0, 1, 2, 3, 4]


async def test_the_public_reader_pages_through_a_log_in_seq_order(
    location: StoreLocation,
) -> None:
    store = await location.open()
    handle = await store.session("s1")
    current = None
    for n in range(7):
        commit, current = small_commit(n, current)
        await handle.commit(commit, fence=F)
    page = await store.commits("s1", after=2, limit=3)
    assert [r.seq for r in page] == [3, 4, 5]
    assert [r.commit.entries[0].content for r in page] == [2, 3, 4]
    assert [r.seq async for r in store.history("s1", page=2)] == [1, 2, 3, 4, 5, 6, 7]
    assert [r.seq async for r in store.history("s1", after=6)] == [7]
    assert await store.commits("s1", after=7) == []
    assert await store.commits("never-written") == []
    with pytest.raises(InvalidInput):
        await store.commits("s1", limit=0)


async def test_unknown_session_loads_empty(location: StoreLocation) -> None:
    handle = await (await location.open()).session("never-written")
    assert (handle.seq, handle.fence, handle.state.tasks, handle.state.is_active) == (
        0,
        0,
        {},
        False,
    )


async def test_stale_expected_seq_is_a_conflict_and_overwrites_nothing(
    location: StoreLocation,
) -> None:
    store = await location.open()
    first, second = await store.session("s1"), await store.session("s1")
    await first.commit(Commit(entries=(entry("first"),)), fence=F)
    with pytest.raises(ConflictError) as raised:
        await second.commit(Commit(entries=(entry("second"),)), fence=F)
    assert raised.value.code == "conflict" and raised.value.retryable
    assert second.seq == 0, "a rejected commit must not change the writer's state"
    assert await second.refresh() == 1
    await second.commit(Commit(entries=(entry("second"),)), fence=F)
    reloaded = await (await location.open()).session("s1")
    assert [e.content for e in await reloaded.entries()] == ["first", "second"]


# --- fencing --------------------------------------------------------------------------


async def test_newer_claim_fences_out_older_holder_even_after_reload(
    location: StoreLocation,
) -> None:
    store_a, store_b = await location.open(), await location.open()
    a = await store_a.session("s1")
    await a.claim(5, holder="a")
    await a.commit(Commit(entries=(entry("a1"),)), fence=5)
    b = await store_b.session("s1")
    await b.claim(6, holder="b")
    await b.commit(Commit(entries=(entry("b1"),)), fence=6)
    with pytest.raises(ConflictError):  # stale view first
        await a.commit(Commit(entries=(entry("a2"),)), fence=5)
    await a.refresh()
    assert a.fence == 6
    with pytest.raises(FencedError) as raised:  # newest view, old fence
        await a.commit(Commit(entries=(entry("a2"),)), fence=5)
    assert raised.value.details == {"session_id": "s1", "fence": 5, "current": 6}
    with pytest.raises(FencedError):
        await a.claim(5, holder="a")
    final = await (await location.open()).session("s1")
    assert [e.content for e in await final.entries()] == ["a1", "b1"]


async def test_claim_alone_fences_before_the_new_holder_commits_anything(
    location: StoreLocation,
) -> None:
    store = await location.open()
    old, new = await store.session("s1"), await store.session("s1")
    await old.claim(1, holder="old")
    await new.refresh()
    await new.claim(2, holder="new")
    await old.refresh()
    with pytest.raises(FencedError):
        await old.commit(Commit(entries=(entry(),)), fence=1)
    assert (await new.claim(2, holder="new")).seq == new.seq, "the holder re-claims for free"
    with pytest.raises(FencedError) as taken:
        await old.claim(2, holder="old")
    assert taken.value.details["holder"] == "new", "one fence, one holder"
    claims = [
        decode(data, CommitRecord, where=item)
        for item, data in await store.backend.items(layout.log_partition("s1"))
    ]
    assert [(c.holder, c.fence) for c in claims] == [("old", 1), ("new", 2)]


async def test_fences_never_decrease_and_unfenced_writers_keep_the_fence(
    location: StoreLocation,
) -> None:
    handle = await (await location.open()).session("s1")
    await handle.claim(3, holder="h")
    receipt = await handle.commit(Commit(submissions=(submission(),)), fence=None)
    assert receipt.fence == 3 and handle.holder == "h"
    receipt = await handle.commit(Commit(entries=(entry(),)), fence=7)
    assert (receipt.fence, handle.fence) == (7, 7)


# --- write-set rules -------------------------------------------------------------------


async def test_documents_put_patch_and_version_guards(location: StoreLocation) -> None:
    handle = await (await location.open()).session("s1")
    await handle.commit(
        Commit(
            documents=(DocumentPut(name="plan", body={"a": 1, "b": {"c": 2}}, expected_version=0),)
        ),
        fence=F,
    )
    await handle.commit(
        Commit(documents=(DocumentPatch(name="plan", patch={"b": {"c": None, "d": 3}}),)),
        fence=F,
    )
    plan = handle.state.documents["plan"]
    assert (plan.version, plan.body) == (2, {"a": 1, "b": {"d": 3}})
    with pytest.raises(VersionMismatch) as stale:
        await handle.commit(
            Commit(documents=(DocumentPut(name="plan", body={}, expected_version=1),)), fence=F
        )
    assert not stale.value.retryable, "a logical refusal, not a race: reloading won't help"
    with pytest.raises(NotFound):
        await handle.commit(Commit(documents=(DocumentPatch(name="nope", patch={}),)), fence=F)
    assert handle.seq == 2
    created = DocumentPatch(name="control", patch={"cancel": {"t1": "user"}}, create=True)
    await handle.commit(Commit(documents=(created, created)), fence=None)  # ingress may
    control = handle.state.documents["control"]
    assert (control.version, control.body) == (2, {"cancel": {"t1": "user"}})


async def test_task_revisions_are_checked(location: StoreLocation) -> None:
    handle = await (await location.open()).session("s1")
    created = task()
    await handle.commit(Commit(tasks=(created,)), fence=F)
    with pytest.raises(AlreadyExists):
        await handle.commit(Commit(tasks=(task(),)), fence=F)
    with pytest.raises(ConflictError):
        await handle.commit(Commit(tasks=(advance(advance(created)),)), fence=F)
    done = finish(created, result={"ok": True})
    await handle.commit(Commit(tasks=(done,)), fence=F)
    with pytest.raises(InvalidTransition):
        await handle.commit(Commit(tasks=(advance(done, phase="again"),)), fence=F)
    assert handle.state.tasks["t1"].result == {"ok": True}


async def test_submissions_outbox_and_apply_once(location: StoreLocation) -> None:
    handle = await (await location.open()).session("s1")
    accepted = submission("req-1", input="hello")
    message = OutboxMessage(id="op-1", topic="tools.dispatch", payload={"tool": "echo"})
    await handle.commit(Commit(submissions=(accepted,), outbox=(message,)), fence=F)
    assert handle.state.outbox == {"op-1": message}
    with pytest.raises(AlreadyExists):
        await handle.commit(Commit(submissions=(submission("req-1"),)), fence=F)
    await handle.commit(
        Commit(
            outbox_done=("op-1",), applied_operations=("op-1",), submissions=(answer(accepted),)
        ),
        fence=F,
    )
    assert handle.state.outbox == {}
    assert handle.state.submissions["req-1"].answer == "done"
    with pytest.raises(AlreadyApplied) as raised:
        await handle.commit(Commit(applied_operations=("op-1",)), fence=F)
    assert "applied" in raised.value.message
    assert "op-1" in (await (await location.open()).session("s1")).state.applied_operations


async def test_one_commit_is_all_or_nothing(location: StoreLocation) -> None:
    handle = await (await location.open()).session("s1")
    await handle.commit(Commit(tasks=(task("t1"),)), fence=F)
    bad = Commit(entries=(entry("lost?"),), tasks=(task("t2"), task("t1")))
    with pytest.raises(AlreadyExists):
        await handle.commit(bad, fence=F)
    reloaded = await (await location.open()).session("s1")
    assert (reloaded.seq, reloaded.state.entry_count, set(reloaded.state.tasks)) == (1, 0, {"t1"})


# --- baselines and read-only observers ---------------------------------------------------


async def test_baselines_bound_the_replay_and_keep_all_history(location: StoreLocation) -> None:
    store = await location.open(baseline_every=4)
    handle = await store.session("s1")
    current = None
    for n in range(23):
        commit, current = small_commit(n, current)
        await handle.commit(commit, fence=F)
    await store.flush()
    baselines = await store.backend.keys(layout.baseline_partition("s1"))
    assert baselines == [layout.seq_item(16), layout.seq_item(20)], "newest two are kept"
    reloaded = await (await location.open(baseline_every=4)).session("s1")
    assert len(reloaded.state.entries_tail) == 3, "only commits after the baseline replay"
    assert [e.content for e in await reloaded.entries()] == list(range(23))
    assert [e.content for e in await reloaded.entries(5, 9)] == [5, 6, 7, 8]
    assert reloaded.state.tasks == handle.state.tasks


async def test_read_only_observer_reads_but_cannot_write(location: StoreLocation) -> None:
    writer = await (await location.open()).session("s1")
    await writer.commit(Commit(tasks=(task(),), entries=(entry("seen"),)), fence=F)
    observer_store = await location.open(read_only=True)
    observer = await observer_store.session("s1")
    assert [e.content for e in await observer.entries()] == ["seen"]
    with pytest.raises(ReadOnlyStore):
        await observer.commit(Commit(entries=(entry(),)), fence=F)
    with pytest.raises(ReadOnlyStore):
        await observer_store.put_blob(b"data")
    with pytest.raises(ReadOnlyStore):
        await observer_store.create_operation(_operation("op-ro"))
    await writer.commit(Commit(entries=(entry("later"),)), fence=F)
    assert await observer.refresh() == 1


# --- blobs ---------------------------------------------------------------------------------


async def test_blobs_are_content_addressed_and_chunked(location: StoreLocation) -> None:
    store = await location.open(blob_chunk_bytes=64 * 1024)
    small = await store.put_blob(b"hello", "text/plain")
    assert small == await store.put_blob(b"hello", "text/plain")
    big_data = bytes(range(256)) * (3 * 64 * 1024 // 256 + 7)
    big = await store.put_blob(big_data)
    chunks = await store.backend.keys(layout.blob_partition(big.digest))
    assert len(chunks) == big.chunks == 4
    assert await store.get_blob(big) == big_data
    assert await store.get_blob(small) == b"hello"
    with pytest.raises(NotFound):
        await store.get_blob(BlobRef(digest="0" * 64, size=1, chunk_bytes=1024))


async def test_blob_larger_than_any_backend_item_round_trips(location: StoreLocation) -> None:
    store = await location.open()
    data = bytes(range(256)) * 4096  # 1 MiB: above DynamoDB's 400 KB item limit
    assert await store.get_blob(await store.put_blob(data)) == data


async def test_oversized_blob_and_record_are_refused_with_the_limit(
    location: StoreLocation,
) -> None:
    store = await location.open(max_blob_bytes=4096, max_record_bytes=2048)
    with pytest.raises(PayloadTooLarge) as raised:
        await store.put_blob(b"x" * 5000)
    assert "4,096" in raised.value.message and raised.value.details["limit"] == 4096
    handle = await store.session("s1")
    with pytest.raises(PayloadTooLarge) as raised:
        await handle.commit(Commit(entries=(entry("y" * 3000),)), fence=F)
    assert "2,048" in raised.value.message and "blob" in raised.value.message
    assert handle.seq == 0 and (await (await location.open()).session("s1")).seq == 0


async def test_damaged_blob_is_reported_not_returned(location: StoreLocation) -> None:
    store = await location.open()
    ref = await store.put_blob(b"original")
    await store.backend.put(
        layout.blob_partition(ref.digest), layout.chunk_item(ref.chunk_bytes, 0), b"tampered"
    )
    with pytest.raises(CorruptRecord):
        await store.get_blob(ref)


# --- schema versions and corrupt records -----------------------------------------------------


async def test_unknown_record_version_fails_clearly(location: StoreLocation) -> None:
    store = await location.open()
    handle = await store.session("s1")
    await handle.commit(Commit(entries=(entry(),)), fence=F)
    future = {"v": 2, "type": "commit", "session_id": "s1", "seq": 2, "shiny": True}
    await store.backend.create(
        layout.log_partition("s1"), layout.seq_item(2), json.dumps(future).encode()
    )
    with pytest.raises(UnknownRecordVersion) as raised:
        await (await location.open()).session("s1")
    assert "version 2" in raised.value.message and "version 1" in raised.value.message


@pytest.mark.parametrize(
    "payload", [b"{not json", b'{"type": "commit"}', b'{"v":1,"type":"commit","seq":"x"}']
)
async def test_corrupt_record_fails_clearly(location: StoreLocation, payload: bytes) -> None:
    store = await location.open()
    await store.backend.create(layout.log_partition("s1"), layout.seq_item(1), payload)
    with pytest.raises(CorruptRecord) as raised:
        await store.session("s1")
    assert "session/s1/log" in raised.value.message


async def test_bad_session_id_is_invalid_input(location: StoreLocation) -> None:
    store = await location.open()
    with pytest.raises(InvalidInput):
        await store.session("../etc/passwd")


# --- operation records ----------------------------------------------------------------------


def _operation(operation_id: str, session_id: str = "s1") -> Operation:
    return Operation(
        operation_id=operation_id,
        session_id=session_id,
        tool="send_email",
        args={"to": "a@example.com"},
        replay=ReplayPolicy.UNSAFE,
    )


async def test_operation_create_is_conditional(location: StoreLocation) -> None:
    store = await location.open()
    created = await store.create_operation(_operation("op-1"))
    assert await store.create_operation(created) == created, "an identical retry is harmless"
    other = _operation("op-1").model_copy(update={"args": {"to": "b@example.com"}})
    with pytest.raises(AlreadyExists) as raised:
        await store.create_operation(other)
    assert raised.value.details["status"] == "accepted"
    assert await store.get_operation("op-1") == created
    assert await store.get_operation("op-missing") is None


async def test_operation_transitions_have_exactly_one_winner(location: StoreLocation) -> None:
    store = await location.open()
    created = await store.create_operation(_operation("op-1"))
    results = await asyncio.gather(
        *(
            store.transition_operation(created, OperationStatus.RUNNING, executor=f"hands-{n}")
            for n in range(5)
        ),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, Operation)]
    assert len(winners) == 1 and all(
        isinstance(r, ConflictError) for r in results if r not in winners
    )
    current = await store.get_operation("op-1")
    assert current == winners[0] and current.rev == 2
    with pytest.raises(InvalidTransition):
        await store.transition_operation(current, OperationStatus.ACCEPTED)
    done = await store.transition_operation(current, OperationStatus.SUCCEEDED)
    assert (await store.get_operation("op-1")) == done


async def test_operation_result_is_written_once(location: StoreLocation) -> None:
    store = await location.open()
    await store.create_operation(_operation("op-1"))
    result = OperationResult(
        operation_id="op-1", session_id="s1", succeeded=True, output={"message_id": "m-1"}
    )
    assert await store.put_operation_result(result) == result
    assert await store.put_operation_result(result) == result, "an identical retry is harmless"
    with pytest.raises(AlreadyExists):
        await store.put_operation_result(
            result.model_copy(update={"output": {"message_id": "m-2"}})
        )
    assert await store.get_operation_result("op-1") == result
    assert await store.get_operation_result("op-2") is None
    with pytest.raises(NotFound):  # results belong to recorded operations
        await store.put_operation_result(result.model_copy(update={"operation_id": "op-2"}))


async def test_operations_are_listed_by_session(location: StoreLocation) -> None:
    store = await location.open()
    for operation_id, session_id in [("op-a", "s1"), ("op-b", "s1"), ("op-c", "s2")]:
        await store.create_operation(_operation(operation_id, session_id))
    listed = await store.list_operations("s1")
    assert sorted(op.operation_id for op in listed) == ["op-a", "op-b"]
    assert await store.list_operations("s3") == []


# --- the active-session index -----------------------------------------------------------------


async def _active(location: StoreLocation) -> set[str]:
    store = await location.open()
    return {session_id async for session_id in store.active_sessions()}


async def test_active_index_follows_open_work(location: StoreLocation) -> None:
    store = await location.open()
    busy, idle = await store.session("busy"), await store.session("idle")
    started = task()
    await busy.commit(Commit(tasks=(started,)), fence=F)
    await idle.commit(Commit(entries=(entry(),)), fence=F)
    accepted = submission()
    await idle.commit(Commit(submissions=(accepted,)), fence=F)
    assert await _active(location) == {"busy", "idle"}
    await idle.commit(Commit(submissions=(answer(accepted),)), fence=F)
    await busy.commit(Commit(tasks=(finish(started),)), fence=F)
    assert await _active(location) == set()


async def test_sweep_keeps_active_sessions_and_drops_finished_ones(
    location: StoreLocation,
) -> None:
    store = await location.open()
    handle = await store.session("s1")
    await handle.commit(Commit(tasks=(task(),)), fence=F)
    await store.index.mark("ghost")  # e.g. left by a writer that crashed before committing
    assert await store.sweep("s1") is True
    assert await store.sweep("ghost") is False
    assert await _active(location) == {"s1"}


async def test_a_quiet_mark_leaves_a_session_out_until_news_lands(location: StoreLocation) -> None:
    """A session marked quiet is left out of a listing that honours the marks; one that
    rechecks it lists it when its log moved past the mark (stale); an unfenced commit —
    news from outside the lease holder — takes the mark back; a mark at a seq the log
    has moved past is not made; a finished session's mark goes with its marker."""
    store = await location.open()
    waiting, busy = await store.session("waiting"), await store.session("busy")
    await waiting.commit(Commit(tasks=(task(),)), fence=F)
    await busy.commit(Commit(tasks=(task(),)), fence=F)
    assert await store.index.quiet("waiting", seq=waiting.seq) is True

    async def listed(recheck: bool) -> set[str]:
        found = store.active_sessions(verify=lambda session_id: recheck)
        return {session_id async for session_id in found}

    assert await listed(recheck=False) == {"busy"}
    assert await listed(recheck=True) == {"busy"}, "a fresh mark holds on a recheck"
    assert await _active(location) == {"waiting", "busy"}, "without verify: every one"
    await waiting.commit(Commit(entries=(entry(),)), fence=F)  # its holder's own commit
    assert await listed(recheck=False) == {"busy"}
    assert await listed(recheck=True) == {"waiting", "busy"}, "stale: the log moved past it"

    assert await store.index.quiet("waiting", seq=waiting.seq) is True
    await waiting.commit(Commit(submissions=(submission(),)), fence=None)  # news
    assert await listed(recheck=False) == {"waiting", "busy"}
    assert await store.index.quiet("waiting", seq=waiting.seq - 1) is False, "moved past"
    assert await listed(recheck=False) == {"waiting", "busy"}

    assert await store.index.quiet("busy", seq=busy.seq) is True
    (open_task,) = [t for t in busy.state.tasks.values() if not t.is_terminal]
    await busy.commit(Commit(tasks=(finish(open_task),)), fence=F)
    assert await listed(recheck=True) == {"waiting"}
    marks = await store.backend.keys(quiet_partition("busy"))
    assert "busy" not in marks, "a finished session keeps no quiet mark"


async def test_a_drive_dropped_after_its_finishing_commit_still_sweeps_the_marker(
    location: StoreLocation,
) -> None:
    """The commit that finished the session landed; its writer (a drive whose lease was
    lost) is cancelled while the index catches up: the index still catches up."""
    store = await location.open()
    handle = await store.session("s1")
    started = task()
    await handle.commit(Commit(tasks=(started,)), fence=F)
    sweeping, go_on = asyncio.Event(), asyncio.Event()
    sweep = store.index.sweep

    async def slow_sweep(session_id: str, *, finished_at_seq: int) -> None:
        sweeping.set()
        await go_on.wait()
        await sweep(session_id, finished_at_seq=finished_at_seq)

    store.index.sweep = slow_sweep  # type: ignore[method-assign]
    finishing = asyncio.create_task(handle.commit(Commit(tasks=(finish(started),)), fence=F))
    await sweeping.wait()
    finishing.cancel()  # the drive is dropped
    with contextlib.suppress(asyncio.CancelledError):
        await finishing
    go_on.set()
    for _ in range(100):  # the sweep goes on by itself
        if await _active(location) == set():
            break
        await asyncio.sleep(0.05)
    assert await _active(location) == set()


# --- the directory of every session --------------------------------------------------------


async def test_the_directory_lists_every_session_by_id_in_pages(location: StoreLocation) -> None:
    """Finished sessions too (the active index forgets them); pages follow the id order
    across the shards, and a prefix narrows the listing."""
    store = await location.open()
    names = ["acme:a", "acme:b", "beta:1", "beta:2", "zeta"]
    for name in reversed(names):
        handle = await store.session(name)
        started = task()
        await handle.commit(Commit(tasks=(started,)), fence=F)
        await handle.commit(Commit(tasks=(finish(started),)), fence=F)
    await (await store.session("no-commits")).refresh()  # opened, never written: absent
    assert await _active(location) == set()
    first, after = await store.directory.page(limit=2)
    assert first == ["acme:a", "acme:b"] and after == "acme:b"
    second, after = await store.directory.page(after=after, limit=2)
    assert second == ["beta:1", "beta:2"]
    last, after = await store.directory.page(after=after, limit=2)
    assert last == ["zeta"] and after is None
    acme, _ = await store.directory.page(prefix="beta:", limit=10)
    assert acme == ["beta:1", "beta:2"]


# --- the Hands' beats (for operators) ------------------------------------------------------


async def test_hands_beats_are_overwritten_listed_forgotten_and_left(
    location: StoreLocation,
) -> None:
    """A beat replaces the last one of its Hands; a corrupt record is skipped and loses
    nothing else; a beat older than a day is not listed and is removed by ``forget``; a
    Hands that leaves takes its record with it."""
    store = await location.open()
    now = datetime.now(UTC)

    def beat(executor: str, at: datetime, running: int = 0) -> HandsBeat:
        ops = tuple(
            RunningOperation(operation_id=f"op-{n}", tool="t", session_id="s1", since=at)
            for n in range(running)
        )
        return HandsBeat(
            executor=executor,
            process="host pid 1",
            concurrency=4,
            running=ops,
            queue=QueueBacklog(pending=3, ack_pending=1, oldest_age_seconds=2.5),
            beat_at=at,
            every_seconds=10,
        )

    await store.fleet.beat(beat("hands-a", now - timedelta(seconds=20)))
    await store.fleet.beat(beat("hands-a", now, running=2))
    await store.fleet.beat(beat("hands-b", now - timedelta(days=2)))
    await store.backend.put(HANDS_PARTITION, "hands-c", b"{not json")
    listed = await store.fleet.hands()
    assert [(h.executor, h.in_use, h.beat_at) for h in listed] == [("hands-a", 2, now)]
    assert listed[0].queue == QueueBacklog(pending=3, ack_pending=1, oldest_age_seconds=2.5)
    assert await store.fleet.forget() == ["hands-b"]
    await store.fleet.leave("hands-a")
    assert await store.fleet.hands() == []
    assert await store.backend.keys(HANDS_PARTITION) == ["hands-c"]  # unreadable, kept


async def test_missing_bucket_or_table_is_a_clear_error(location: StoreLocation) -> None:
    url = (
        location.url.replace("bh-tests", "bh-absent-bucket")
        .replace("dynamodb://bh-", "dynamodb://absent-")
        .replace("/store-", "/absent-")
    )
    # SQLite files are created when opened for writing; a read-only open cannot create.
    with pytest.raises(StoreMissing) as raised:
        await open_store(url, read_only=location.kind == "sqlite")
    assert "does not exist" in raised.value.message and "bh store init" in raised.value.message


async def test_writers_with_different_chunk_sizes_share_blobs(location: StoreLocation) -> None:
    small, large = await location.open(blob_chunk_bytes=1024), await location.open()
    data = bytes(range(256)) * 40
    by_small, by_large = await small.put_blob(data), await large.put_blob(data)
    assert by_small.digest == by_large.digest and by_small.chunks == 10
    assert await large.get_blob(by_small) == data == await small.get_blob(by_large)


async def test_the_store_clock_is_the_stores_and_never_ahead_of_it(
    location: StoreLocation,
) -> None:
    first, second = await location.open(), await location.open()
    await first.clock.fresh()
    await second.clock.fresh()
    # the servers here run on this machine's clock: the store's time is that, at most a
    # resolution (a Date header's whole second) and a round trip behind, never ahead
    for store in (first, second):
        now = datetime.now(UTC)
        told = store.clock.now()
        assert told <= datetime.now(UTC) + timedelta(milliseconds=50)
        assert told >= now - store.clock.resolution - timedelta(seconds=1)
