"""``bh store inspect`` shows operators what a load found: uncertain operations with their
reasons, parked and cancelled tasks, and baselines it had to skip."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from brain.registry import Registry
from session_store import layout
from tests.support.kernel import cancel_during_call, kernel, mail_kind
from tests.support.processes import ROOT


def inspect(store_url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bh.cli", "store", "inspect", store_url, "s1"],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


async def test_a_call_cancelled_in_flight_and_a_skipped_baseline_are_shown(
    tmp_path: Path,
) -> None:
    registry = Registry()
    registry.add(mail_kind())
    async with kernel(tmp_path, registry) as k:
        await cancel_during_call(k)
        handle = await k.store.session("s1")
        seq = await handle.write_baseline()
        await k.store.backend.put(layout.baseline_partition("s1"), layout.seq_item(seq), b"{")
        (operation,) = await k.store.list_operations("s1")
        shown = await asyncio.to_thread(inspect, f"sqlite:///{tmp_path}/kernel.db")
    assert operation.operation_id in shown and "uncertain" in shown
    assert "cancelled while the call to send was in flight" in shown
    assert f"skipped while loading: baseline session/s1/base/{layout.seq_item(seq)}" in shown
