"""A process's build id (``runtime.build``): said by ``bh --version`` and the probes, and
written into every commit the process makes (the store's ``writer``), so an operator
can tell which build drove each step of a session across a rolling upgrade."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from contracts import Commit
from runtime.build import build_id, image_build_id, package_version
from session_store import open_store
from webapi.probes import Probes


def test_the_build_id_is_the_environments_else_the_package_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BH_BUILD_ID", raising=False)
    assert build_id() == package_version() != "0+unknown"
    monkeypatch.setenv("BH_BUILD_ID", "1.2.3+feedbeef0123")
    assert build_id() == "1.2.3+feedbeef0123"
    assert image_build_id("sha256:" + "ab" * 32) == f"{package_version()}+{'ab' * 6}"


async def test_every_commit_names_the_build_that_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BH_BUILD_ID", "9.9.9+0123456789ab")
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        handle = await store.session("s1")
        await handle.claim(1, holder="brain-a")
        await handle.commit(Commit(), fence=1)
        records = [record async for record in store.history("s1")]
    finally:
        await store.close()
    assert len(records) == 2
    assert all(r.writer.endswith("@9.9.9+0123456789ab") for r in records), records


async def test_the_probes_say_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BH_BUILD_ID", "9.9.9+0123456789ab")
    transport = httpx.ASGITransport(app=Probes("brain").app())
    async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
        for path in ("/livez", "/readyz"):
            answer = (await client.get(path)).json()
            assert answer["build"] == "9.9.9+0123456789ab", path


def test_bh_version_says_the_build() -> None:
    said = subprocess.run(
        [sys.executable, "-m", "bh.cli", "--version"],
        env={"BH_BUILD_ID": "9.9.9+0123456789ab", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert said.stdout.strip() == "brainhands 9.9.9+0123456789ab"
