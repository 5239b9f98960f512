"""State and storage stay proportional to open work as history grows (issue 6, defect 7):
settled tasks, submissions and applied-operation marks leave the state every load reads
and stay readable on demand; storage grows linearly; no blob outlives every record that
could reach it."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from brain.registry import Registry
from contracts import EntryKind, Outcome, SubmissionStatus
from session_store import SessionStore, layout
from session_store.codec import encode
from session_store.uploads import Upload
from tests.support.backends import Counting
from tests.support.kernel import Kernel, kernel
from tests.support.workloads import REPORT, install_report

pytestmark = pytest.mark.sqlite

OUTPUT_BYTES = 2_000
EVERY = 12  # K: a baseline every 12 commits


async def grow(k: Kernel, start: int, stop: int) -> None:
    for n in range(start, stop):
        await k.client.submit("s1", f"r{n}", {"task": {"kind": REPORT}})
        await k.run()
    await k.store.flush()


async def load_bytes(k: Kernel) -> int:
    """Bytes a fresh load reads, right after a baseline of the current head."""
    await (await k.store.session("s1")).write_baseline()
    counting = Counting(k.store.backend)
    await SessionStore(counting, k.store.settings).session("s1")
    return counting.bytes_read


def storage(db: Path) -> tuple[int, set[str], set[str]]:
    """Bytes stored; every blob digest; every digest a non-blob record refers to."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT partition, value FROM kv").fetchall()
    total = sum(len(value) for _, value in rows)
    blobs = {p.removeprefix("blob/") for p, _ in rows if p.startswith("blob/")}
    text = b" ".join(v for p, v in rows if not p.startswith("blob/")).decode(errors="ignore")
    reachable = set(re.findall(r'"digest":"([0-9a-f]{64})"', text))
    return total, blobs, reachable


async def test_load_reads_open_work_only_and_storage_grows_linearly(tmp_path: Path) -> None:
    async with kernel(tmp_path, Registry(), baseline_every=EVERY, baselines_kept=2) as k:
        install_report(k.registry, k.tools, OUTPUT_BYTES)
        await grow(k, 0, 25)
        small_load, small_seq = await load_bytes(k), (await k.store.session("s1")).seq
        small_total, _, _ = storage(tmp_path / "kernel.db")
        await grow(k, 25, 100)
        large_load, large_seq = await load_bytes(k), (await k.store.session("s1")).seq
        large_total, blobs, reachable = storage(tmp_path / "kernel.db")

        assert large_seq >= 3 * small_seq
        assert large_load <= 1.2 * small_load, (small_load, large_load)
        per_commit = (small_total / small_seq, large_total / large_seq)
        assert per_commit[1] <= 1.3 * per_commit[0], per_commit
        assert blobs <= reachable, f"{len(blobs - reachable)} blobs no record can reach"


async def test_settled_work_is_archived_yet_readable_and_idempotent(tmp_path: Path) -> None:
    async with kernel(tmp_path, Registry(), baseline_every=EVERY) as k:
        install_report(k.registry, k.tools, OUTPUT_BYTES)
        await grow(k, 0, 30)
        handle = await k.store.session("s1")
        assert "root.r0" not in handle.state.tasks and "r0" not in handle.state.submissions
        archived = await handle.task("root.r0")
        assert archived is not None and archived.outcome is Outcome.SUCCEEDED
        first = await handle.submission("r0")
        assert first is not None and first.status is SubmissionStatus.ANSWERED
        again = await k.client.submit("s1", "r0", {"task": {"kind": REPORT}})
        assert again == first and (await k.store.session("s1")).seq == handle.seq
        assert (await k.client.get("s1", "r0")) == first
        results = [e for e in await handle.entries() if e.kind is EntryKind.TOOL_RESULT]
        assert len(results) == 30
        assert json.dumps(results[0].content).count("x") == OUTPUT_BYTES


async def test_a_dead_baseline_writers_upload_is_collected(tmp_path: Path) -> None:
    # What a baseline writer leaves when it dies between uploading a state blob and
    # creating the baseline record: the journal item and the blob, nothing refers to it.
    async with kernel(tmp_path, Registry(), baseline_every=EVERY, baselines_kept=2) as k:
        install_report(k.registry, k.tools, OUTPUT_BYTES)
        await grow(k, 0, 3)
        handle = await k.store.session("s1")
        orphan = await k.store.put_blob(b'{"v":1,"type":"state","half":"written"}')
        await k.store.backend.create(
            layout.baseline_partition("s1"),
            layout.upload_item(orphan.digest),
            encode(Upload(seq=handle.seq, blob=orphan)),
        )
        await grow(k, 3, 20)  # more than two baselines later
        _, blobs, reachable = storage(tmp_path / "kernel.db")
        assert orphan.digest not in blobs, "the orphaned upload was not collected"
        assert blobs <= reachable
        listed = await k.store.backend.keys(layout.baseline_partition("s1"))
        assert not [item for item in listed if item.startswith(layout.UPLOAD_PREFIX)]
