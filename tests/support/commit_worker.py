"""A separate OS process that commits to one session, for race and crash tests.

Modes (one JSON object per line on stdout, flushed):

``race URL SESSION WORKER ATTEMPTS BARRIER`` — wait for the BARRIER file, then make
ATTEMPTS commits, each with a fresh entry id; print ``{"ok": seq, "id": …}`` or
``{"conflict": id}`` per attempt (refreshing after a conflict).

``loop URL SESSION`` — commit forever: print ``{"begin": id}`` before each commit and
``{"ok": seq, "id": …}`` after its receipt. The parent SIGKILLs it at random moments.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

from contracts import Commit, ConflictError
from session_store import open_store
from tests.support.builders import entry


def say(**message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def race(url: str, session_id: str, worker: str, attempts: int, barrier: Path) -> None:
    store = await open_store(url)
    handle = await store.session(session_id)
    # Spin: all workers should start committing at the same moment.
    while not await asyncio.to_thread(barrier.exists):
        pass
    for attempt in range(attempts):
        entry_id = f"{worker}-{attempt}"
        try:
            receipt = await handle.commit(
                Commit(entries=(entry(entry_id, entry_id=entry_id),)), fence=0
            )
            say(ok=receipt.seq, id=entry_id)
        except ConflictError:
            say(conflict=entry_id)
            await handle.refresh()
    await store.close()


async def loop(url: str, session_id: str) -> None:
    store = await open_store(url, baseline_every=7)
    handle = await store.session(session_id)
    say(loaded=handle.seq)
    while True:
        entry_id = uuid.uuid4().hex
        say(begin=entry_id)
        receipt = await handle.commit(
            Commit(entries=(entry(entry_id, entry_id=entry_id),)), fence=0
        )
        say(ok=receipt.seq, id=entry_id)


def main() -> None:
    mode, url, session_id, *rest = sys.argv[1:]
    if mode == "race":
        worker, attempts, barrier = rest
        asyncio.run(race(url, session_id, worker, int(attempts), Path(barrier)))
    else:
        asyncio.run(loop(url, session_id))


if __name__ == "__main__":
    main()
