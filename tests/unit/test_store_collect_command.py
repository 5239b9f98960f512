"""``bh store collect`` against a SQLite store: a session's collection and the whole
store's, each printing what ``Collected`` says; and the settings on the help pages of
the command and of ``python -m scheduler`` that runs it periodically."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from bh.cli import app
from contracts import NotFound
from contracts.workspace import WorkspaceRetention, WorkspaceVersion
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.workspaces import apply_version

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
FIRST = {"calc.py": b"def add(a, b):\n    return a - b\n", "README.md": b"# calc\n"}
FIXED = {**FIRST, "calc.py": b"def add(a, b):\n    return a + b\n"}


async def _two_versions(url: str, session_id: str, keep: int) -> list[WorkspaceVersion]:
    store = await open_store(url, create=True)
    try:
        made = [
            (await apply_version(store, session_id, tree, operation_id=f"{session_id}-op-{n}"))[0]
            # a file of its own: no two sessions' versions are the same manifest blob
            for n, tree in enumerate({**t, "SESSION": session_id.encode()} for t in (FIRST, FIXED))
        ]
        await SessionClient(store).set_retention(session_id, WorkspaceRetention(keep_versions=keep))
        return made
    finally:
        await store.close()


async def _readable(url: str, version: WorkspaceVersion) -> bool:
    store = await open_store(url)
    try:
        await store.workspaces.manifest(version)
        return True
    except NotFound:
        return False
    finally:
        await store.close()


def test_bh_store_collect_a_session_then_the_whole_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    first, head = asyncio.run(_two_versions(url, "w1", keep=1))
    other_first, _ = asyncio.run(_two_versions(url, "w2", keep=1))
    runner = CliRunner()

    young = runner.invoke(app, ["store", "collect", url, "--session", "w1"], env=ENV)
    assert young.exit_code == 0, young.output
    assert "w1: 0 version(s) and 0 blob(s) deleted; kept 2 young" in young.output
    assert asyncio.run(_readable(url, first))  # within the grace period

    args = ["store", "collect", url, "--grace-seconds", "0"]
    one = runner.invoke(app, [*args, "--session", "w1"], env=ENV)
    assert one.exit_code == 0, one.output
    assert "w1: 1 version(s) and 2 blob(s) deleted" in one.output
    assert not asyncio.run(_readable(url, first)) and asyncio.run(_readable(url, head))
    assert asyncio.run(_readable(url, other_first))  # another session's: not asked for

    everything = runner.invoke(app, args, env=ENV)
    assert everything.exit_code == 0, everything.output
    assert "the store: 0 version(s) and 1 blob(s) deleted" in everything.output
    assert not asyncio.run(_readable(url, other_first)) and asyncio.run(_readable(url, head))

    refused = runner.invoke(app, [*args[:2], "ftp://nowhere/store"], env=ENV)
    assert refused.exit_code == 2 and "invalid_store_url" in refused.output, refused.output


def test_the_collection_settings_are_on_the_help_pages() -> None:
    runner = CliRunner()
    page = runner.invoke(app, ["store", "collect", "--help"], env=ENV).output
    assert "--session" in page and "env var: BH_WORKSPACE_GRACE_SECONDS" in page, page
    page = runner.invoke(app, ["workspace", "retention", "--help"], env=ENV).output
    assert "--keep" in page and "--clear" in page, page
    scheduler = subprocess.run(
        [sys.executable, "-m", "scheduler", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        check=True,
    ).stdout
    assert "env var: BH_SCHEDULER_COLLECT_SECONDS" in scheduler, scheduler
    assert "env var: BH_WORKSPACE_GRACE_SECONDS" in scheduler, scheduler
