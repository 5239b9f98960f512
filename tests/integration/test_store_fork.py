"""Forking a session at a chosen commit (``SessionStore.fork``): the fork reads as the
original did at the fork point without a copy of its log, continues on its own, reuses
the results of operations committed before the fork point and gives new operations ids
of its own; the original is untouched, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from brain.context import PhaseContext
from brain.outcome import Done, Effects
from brain.registry import Registry
from brain.tools import ToolSpec
from contracts import AlreadyExists, CommitRecord, Entry, EntryKind, InvalidInput, NotFound
from session_store import SessionStore, layout
from tests.support.fork_plugins import twice_kind
from tests.support.kernel import FAST, Kernel, kernel, kind

PARTITIONS = (
    layout.log_partition,
    layout.baseline_partition,
    layout.segment_partition,
    layout.archived_tasks_partition,
    layout.archived_submissions_partition,
    layout.applied_partition,
)


def registry() -> Registry:
    """``twice``: sends m1 (its result applied), then in a later phase asks for m1 again
    (reused, never re-sent) and sends m2. ``note``: one entry, done."""

    async def note(ctx: PhaseContext) -> Done:
        entry = Entry(id=f"note.{ctx.task.id}", kind=EntryKind.NOTE, content={"input": ctx.input})
        return Done(result=ctx.input, effects=Effects(entries=(entry,)))

    found = Registry()
    found.add(twice_kind(backoff=FAST))
    found.add(kind("note", {"start": note}))
    return found


def sending(k: Kernel) -> list[str]:
    sent: list[str] = []

    async def send(args: dict[str, Any], operation_id: str) -> Any:
        sent.append(operation_id)
        return {"to": args["to"]}

    k.tools.register(ToolSpec(name="send"), send)
    return sent


async def items_of(store: SessionStore, session_id: str) -> dict[str, list[tuple[str, bytes]]]:
    return {name(session_id): await store.backend.items(name(session_id)) for name in PARTITIONS}


async def records(store: SessionStore, session_id: str) -> list[CommitRecord]:
    return [record async for record in store.history(session_id)]


async def test_a_fork_starts_where_the_original_was_and_leaves_it_untouched(
    tmp_path: Path,
) -> None:
    async with kernel(tmp_path, registry()) as k:
        sent = sending(k)
        await k.submit_task("twice")
        await k.run("s1")
        original = await k.store.session("s1")
        assert original.state.submissions["r1"].status.value == "answered"
        at = next(
            r.seq
            for r in await records(k.store, "s1")
            if any(t.phase == "second" for t in r.commit.tasks)
        )
        before = await items_of(k.store, "s1")
        sent_by_original = list(sent)

        fork = await k.store.fork("s1", at=at, into="s2")
        then = await k.store.session_at("s1", at)
        assert fork.seq == 1 and fork.state.origin is not None
        assert (fork.state.origin.session_id, fork.state.origin.seq) == ("s1", at)
        assert fork.state.tasks == then.state.tasks, "the tasks as they were"
        assert fork.state.submissions == then.state.submissions
        assert await fork.entries() == await then.entries()
        assert fork.state.fence == 0 and fork.state.holder is None, "no lease inherited"
        log = await records(k.store, "s2")
        assert len(log) == 1 and log[0].commit.fork is not None, "one record: no copied log"

        await k.run("s2")
        done = await k.store.session("s2")
        answer = done.state.submissions["r1"].answer
        assert done.state.submissions["r1"].status.value == "answered"
        m1_original, m2_original = sent_by_original
        assert isinstance(answer, dict)
        assert answer["m1"] == m1_original, "committed before the fork point: reused"
        assert answer["m2"] != m2_original, "a new operation: an id of the fork's own"
        assert sent == [*sent_by_original, answer["m2"]], "m1 was not sent again"
        assert await items_of(k.store, "s1") == before, "the original, byte for byte"


async def test_a_fork_can_be_continued_with_a_new_submission(tmp_path: Path) -> None:
    async with kernel(tmp_path, registry()) as k:
        sending(k)
        for n in range(1, 4):
            await k.submit_task("note", n, request_id=f"r{n}")
            await k.run("s1")
        head = (await k.store.session("s1")).seq
        at = next(
            r.seq
            for r in await records(k.store, "s1")
            if r.commit.submissions and (r.commit.submissions[0].request_id == "r2")
        )
        await k.store.fork("s1", at=at, into="s2")
        again = await k.client.submit("s2", "r1", {"task": {"kind": "note", "input": 99}})
        assert again.answer == 1, "same request, same submission: r1 is in its history"
        await k.submit_task("note", 3.5, session_id="s2", request_id="r3")
        await k.run("s2")
        fork = await k.store.session("s2")
        assert fork.state.submissions["r3"].answer == 3.5, (
            "r3 is new here (the original's is later)"
        )
        assert (await k.store.session("s1")).seq == head
        notes: list[Any] = [e.content for e in await fork.entries() if e.kind is EntryKind.NOTE]
        assert [note["input"] for note in notes] == [1, 2, 3.5], "r2 ran here, then the new r3"


async def test_a_fork_of_a_long_session_reads_its_archived_history_from_the_original(
    tmp_path: Path,
) -> None:
    async with kernel(tmp_path, registry(), baseline_every=5) as k:
        sending(k)
        for n in range(12):
            await k.submit_task("note", n, request_id=f"r{n}")
            await k.run("s1")
        original = await k.store.session("s1")
        assert original.state.has_archive and original.state.entries_archived > 0
        at = original.seq - 3
        then = await k.store.session_at("s1", at)
        for n in range(12, 15):  # the original goes on after the fork point
            await k.submit_task("note", n, request_id=f"r{n}")
            await k.run("s1")

        fork = await k.store.fork("s1", at=at, into="s2")
        assert await fork.entries() == await then.entries()
        archived = next(f"root.r{n}" for n in range(12) if f"root.r{n}" not in fork.state.tasks)
        assert await fork.task(archived) == await then.task(archived)
        assert await fork.task("root.r13") is None, "the original's, after the fork point"
        await k.submit_task("note", "mine", session_id="s2", request_id="r13")
        await k.run("s2")
        reloaded = await k.store.session("s2")
        assert reloaded.state.submissions["r13"].answer == "mine"

        grand = await k.store.fork("s2", at=1, into="s3")
        assert await grand.entries() == await then.entries(), "a fork of a fork"


async def test_what_a_fork_refuses(tmp_path: Path) -> None:
    async with kernel(tmp_path, registry()) as k:
        sending(k)
        await k.submit_task("note", 1)
        await k.run("s1")
        head = (await k.store.session("s1")).seq
        with pytest.raises(NotFound):
            await k.store.fork("s1", at=head + 1, into="s2")
        await k.store.fork("s1", at=head, into="s2")
        with pytest.raises(AlreadyExists):
            await k.store.fork("s1", at=head, into="s2")
        with pytest.raises(AlreadyExists):
            await k.store.fork("s2", at=1, into="s1")
        with pytest.raises(InvalidInput):
            await k.store.fork("s3", at=1, into="s3")
