"""How fast the web console opens a long session: a session of ``--commits`` commits
(default 10,000) in a SQLite store, its console page fetched through the Session API
(in process, over loopback HTTP) ``--repeats`` times. The baseline of the same run is
the API's own JSON view of the session (``GET /v1/sessions/{id}``): what the page adds
is its timeline page (the newest 50 commits, read through ``store.commits``), the task
tree and the HTML.

    python -m bench.console --commits 10000 --repeats 7
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import SecretStr

from bench.stats import median
from contracts import Commit, Entry
from contracts.entry import EntryKind
from session_api.app import create_app
from session_store import open_store
from webapi.server import serving

TOKEN = "bench-console-token-0123456789"


async def fill(store_url: str, session_id: str, commits: int) -> None:
    """``commits`` commits of one entry each (as a long chat or tool loop writes)."""
    store = await open_store(store_url)
    try:
        handle = await store.session(session_id)
        for n in range(commits):
            entry = Entry(id=f"e{n}", kind=EntryKind.NOTE, content=f"step {n}")
            await handle.commit(Commit(entries=(entry,)), fence=1)
    finally:
        await store.close()


async def timed(http: httpx.AsyncClient, path: str, repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = await http.get(path)
        seconds.append(time.perf_counter() - started)
        response.raise_for_status()
    return seconds


async def main(commits: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as where:
        url = f"sqlite:///{Path(where) / 'store.db'}"
        started = time.perf_counter()
        await fill(url, "long", commits)
        print(f"{commits} commits written in {time.perf_counter() - started:.1f} s")
        store = await open_store(url)
        app = create_app(store=store, wakes=None, token=SecretStr(TOKEN))
        try:
            async with serving(app) as base:
                cookies = {"bh_console": TOKEN}
                auth = {"Authorization": f"Bearer {TOKEN}"}
                page = httpx.AsyncClient(base_url=base, cookies=cookies, timeout=60)
                api = httpx.AsyncClient(base_url=base, headers=auth, timeout=60)
                async with page, api:
                    await timed(page, "/console/sessions/long", 1)  # warm
                    view = await timed(api, "/v1/sessions/long", repeats)
                    console = await timed(page, "/console/sessions/long", repeats)
                    oldest = await timed(page, "/console/sessions/long?older=51", repeats)
        finally:
            await store.close()
    base_ms = 1000 * median(view)
    print(f"session view (JSON, baseline): median {base_ms:.1f} ms over {repeats}")
    for name, seconds in (("console page", console), ("console page, oldest commits", oldest)):
        ms, worst = 1000 * median(seconds), 1000 * max(seconds)
        print(f"{name}: median {ms:.1f} ms ({ms / base_ms:.2f}x the baseline), max {worst:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.commits, arguments.repeats))
