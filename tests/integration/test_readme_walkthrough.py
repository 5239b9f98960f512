"""The README's "Tools in sandboxes" walk-through, run as written: its shell block goes
to bash line by line as a new user types it (from the checkout, the infrastructure of
``bh dev up``), and the session it submits is answered with what the local service
served, through the sandboxed ``http_get`` tool on the Hands."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.images import tool_images
from tests.support.processes import ROOT
from tests.support.services import require

# `bh up` serves on fixed ports: one such test at a time (side by side, on one worker)
pytestmark = [
    pytest.mark.redis,
    pytest.mark.nats,
    pytest.mark.slow,
    pytest.mark.xdist_group("bh-up"),
]

SECTION = "## Tools in sandboxes"


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    found = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the section has no sh block"
    return found.group(1)


def typed_into_a_new_shell(
    script: str, *, timeout: float, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash from the checkout with what a new shell has (no system
    variables of an earlier ``bh up``), then ``bh down`` whatever happened."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BH_", "VIRTUAL_ENV"))}
    env |= {"COLUMNS": "200", "PATH": os.environ["PATH"], **(extra or {})}
    try:
        return subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        subprocess.run(
            ["bash", "-c", ". .venv/bin/activate; bh down"], cwd=ROOT, env=env, check=False
        )


def test_the_tools_in_sandboxes_walkthrough_runs_as_written() -> None:
    require("BH_REDIS_URL", "Redis")
    require("BH_NATS_URL", "NATS JetStream")
    tool_images()
    block = walkthrough()
    assert "bh submit fetch-1" in block and "bh watch fetch-1 --until-done" in block
    done = typed_into_a_new_shell("set -e\n" + block, timeout=420)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "http_get@1 registered" in out or "already registered" in out
    assert "answered" in out and '"status": 200' in out.replace('\\"', '"'), out[-6000:]
    assert "http_get" in out and "succeeded" in out


WHOLE_SYSTEM = "## The whole system on one machine"


def blocks(title: str) -> list[str]:
    """The ``sh`` blocks of the README's section ``title``, in order."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(title) :]
    section = section[: section.find("\n## ", len(title))]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


@pytest.mark.docker
def test_the_whole_system_blocks_run_as_written(tmp_path: Path) -> None:
    """The three blocks of "The whole system on one machine", typed into one new shell
    one after the other (with ``bh`` on the PATH, as the README says first): the
    five-emails session answered and looked at every way the first block shows; the
    second's call waits for a person, is approved by the question id the README names,
    and runs; the third streams, reads the session at commit 12 (the first email's
    intent), forks from there, and the fork is answered too."""
    require("BH_REDIS_URL", "Redis")
    require("BH_NATS_URL", "NATS JetStream")
    tool_images()
    found = blocks(WHOLE_SYSTEM)
    assert len(found) == 3, "the section's blocks: whole system, approvals, stream and fork"
    marks = [f"echo '=== block {n} ==='\n{_typed(block)}" for n, block in enumerate(found, 1)]
    script = "set -e\n. .venv/bin/activate\n" + "\n".join(marks)
    # a store of its own: the README's commands reuse the checkout's, where an earlier
    # run left these sessions answered (a new user's first run has none)
    store = {"BH_STORE_URL": f"sqlite:///{tmp_path}/store.db"}
    done = typed_into_a_new_shell(script, timeout=900, extra=store)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-8000:]
    first, second, third = done.stdout.split("=== block ")[1:]
    assert "answered" in first and "brainhands_scheduler_wakes_total" in first, first[-4000:]
    assert "waiting for input: approve.root.notify-2.r1.c0" in second, second[-4000:]
    assert "accepted" in second and "finished" in second, second[-4000:]
    # demo-3 at commit 12 waits on its first email's operation; the fork reuses that
    # operation (its result) and sends the other four anew
    sent = re.findall(r'"to": "(\w+)@example.com", "operation_id": "(op-[0-9a-f]{20})', third)
    assert [name for name, _ in sent] == ["ada", "grace", "alan", "edsger", "barbara"] * 2
    original, forked = dict(sent[:5]), dict(sent[5:])
    assert f"waits (allSettled) on {original['ada']}" in third, third[-4000:]
    assert forked["ada"] == original["ada"]
    assert all(forked[name] != original[name] for name in ("grace", "alan", "edsger", "barbara"))


def _typed(block: str) -> str:
    """The block as a person types it: they read what ``bh submit`` said before the next
    command (which, run back to back, would look at the session before its Brain did)."""
    typed, submitting = [], False
    for line in block.splitlines():
        typed.append(line)
        submitting = submitting or line.startswith("bh submit")
        if submitting and not line.split("#")[0].rstrip().endswith("\\"):
            typed.append("sleep 2")
            submitting = False
    return "\n".join(typed)


WORKSPACES = "## Workspaces"


@pytest.mark.docker
def test_the_workspaces_block_runs_as_written(tmp_path: Path) -> None:
    """The coding assistant on ``bh up`` as the README types it: the tests fail, the
    file is fixed, they pass; every version's change, the tree, a file and the artifacts
    read back through ``bh``."""
    require("BH_REDIS_URL", "Redis")
    require("BH_NATS_URL", "NATS JetStream")
    tool_images()
    (block,) = blocks(WORKSPACES)
    script = "set -e\n. .venv/bin/activate\n" + _typed(block)
    store = {"BH_STORE_URL": f"sqlite:///{tmp_path}/store.db"}
    done = typed_into_a_new_shell(script, timeout=600, extra=store)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-8000:]
    assert "answered" in out, out[-6000:]
    # each version's change: the package added, then the one line of the fix
    assert "A calc/__init__.py" in out and "M calc/__init__.py" in out, out[-6000:]
    assert "-    return sum(values) / (len(values) - 1)" in out, out[-6000:]
    assert "+    return sum(values) / len(values)" in out, out[-6000:]
    for name in ("create.patch", "test-report-1.txt", "fix.patch", "test-report.txt"):
        assert name in out, out[-6000:]
