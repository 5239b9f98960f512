"""``bh init``, the deployment's one-shot init job, against the dev stack: a SQLite store,
the real NATS server and the Docker engine with the tool images. The second run changes
nothing; a changed grant in the declared list is applied as a revision; what cannot be
put in place is one line on stderr and exit status 2, nothing half-applied.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bus import Bus, BusSettings
from hands.images import tool_tag
from session_store import open_store
from tests.support.images import tool_images
from tests.support.services import require

pytestmark = [pytest.mark.nats, pytest.mark.docker, pytest.mark.sqlite]


def bh_init(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bh.cli", "init", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    tool_images()  # built (cached) or skipped without an engine
    return {
        **os.environ,
        "BH_STORE_URL": f"sqlite:///{tmp_path}/store.db",
        "BH_NATS_URL": require("BH_NATS_URL", "NATS"),
        "BH_NAMESPACE": f"i{uuid.uuid4().hex[:10]}",
    }


def declare(path: Path, allow: str) -> Path:
    path.write_text(
        f'[[tools]]\nimage = "{tool_tag("count")}"\nallow = ["{allow}"]\n'
        'config = { LEDGER_URL = "http://ledger.internal:8030" }\n\n'
        f'[[tools]]\nimage = "{tool_tag("echo")}"\n'
    )
    return path


def test_init_puts_everything_in_place_and_a_second_run_changes_nothing(
    environment: dict[str, str], tmp_path: Path
) -> None:
    tools = declare(tmp_path / "tools.toml", "ledger.internal:8030")
    first = bh_init("--tools", str(tools), env=environment)
    assert first.returncode == 0, first.stderr
    namespace = environment["BH_NAMESPACE"].upper()
    assert first.stdout.splitlines() == [
        f"store: ready (sqlite:///{tmp_path}/store.db)",
        f"streams: {namespace}_DISPATCH, {namespace}_RESULTS at 1 replica",
        f"tool count@1: registered (revision 1, {tool_tag('count')}, allows ledger.internal:8030)",
        f"tool echo@1: registered (revision 1, {tool_tag('echo')}, allows no network)",
    ]
    again = bh_init("--tools", str(tools), env=environment)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout.replace(": registered (", ": unchanged (")
    found = asyncio.run(_catalog(environment["BH_STORE_URL"]))
    assert found == {"count@1": (1, ("ledger.internal:8030",)), "echo@1": (1, ())}
    assert asyncio.run(_replicas(environment)) == [1, 1]


def test_the_declared_grant_is_applied_as_a_revision_and_another_config_refused(
    environment: dict[str, str], tmp_path: Path
) -> None:
    first = bh_init("--tools", str(declare(tmp_path / "a.toml", "a.internal:80")), env=environment)
    assert first.returncode == 0, first.stderr
    moved = bh_init("--tools", str(declare(tmp_path / "b.toml", "b.internal:80")), env=environment)
    assert moved.returncode == 0, moved.stderr
    assert f"tool count@1: granted (revision 2, {tool_tag('count')}, allows b.internal:80)" in (
        moved.stdout
    )
    history = asyncio.run(_history(environment["BH_STORE_URL"]))
    assert history[-1] == ("grant", "bh init", f"declared in {tmp_path / 'b.toml'}")
    none = tmp_path / "none.toml"
    none.write_text(
        f'[[tools]]\nimage = "{tool_tag("count")}"\n'
        'config = { LEDGER_URL = "http://ledger.internal:8030" }\n'
    )
    revoked = bh_init("--tools", str(none), env=environment)
    assert f"tool count@1: granted (revision 3, {tool_tag('count')}, allows no network)" in (
        revoked.stdout
    )
    other = tmp_path / "other.toml"
    other.write_text(f'[[tools]]\nimage = "{tool_tag("count")}"\nconfig = {{ LEDGER_URL = "x" }}\n')
    refused = bh_init("--tools", str(other), env=environment)
    assert refused.returncode == 2
    assert refused.stderr.startswith("bh init: tools: already_exists: tool count@1 is already ")
    assert "another config" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert len(asyncio.run(_history(environment["BH_STORE_URL"]))) == 3  # nothing written


def test_what_cannot_be_put_in_place_is_one_line_and_status_2(
    environment: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[tools]]\nimage = "x"\nallow = ["no port"]\n')
    refused = bh_init("--tools", str(bad), env=environment)
    assert refused.returncode == 2 and refused.stdout == ""  # checked before anything
    assert refused.stderr.startswith(f"bh init: tools: invalid_input: the tools file {bad}: ")
    assert len(refused.stderr.splitlines()) == 1 and "allow[0]" in refused.stderr
    no_nats = bh_init(
        "--nats", "nats://127.0.0.1:9", "--wait", "3", env=environment | {"BH_NATS_URL": ""}
    )
    assert no_nats.returncode == 2
    assert no_nats.stderr.splitlines()[-1] == (
        "bh init: streams: store_unavailable: NATS did not answer in 3 s"
    )
    assert "Traceback" not in no_nats.stderr


async def _catalog(url: str) -> dict[str, tuple[int, tuple[str, ...]]]:
    store = await open_store(url)
    try:
        return {t.ref: (t.revision, t.network.allow) for t in await store.tools.definitions()}
    finally:
        await store.close()


async def _history(url: str) -> list[tuple[str, str, str]]:
    store = await open_store(url)
    try:
        return [(r.change.value, r.by, r.reason) for r in await store.tools.history("count", 1)]
    finally:
        await store.close()


async def _replicas(env: dict[str, str]) -> list[int]:
    settings = BusSettings(url=env["BH_NATS_URL"], namespace=env["BH_NAMESPACE"])
    bus = await Bus.connect(settings)
    try:
        return [copies for copies, _ in (await bus.replicas()).values()]
    finally:
        await bus.close()
