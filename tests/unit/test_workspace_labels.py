"""How a tool declares its workspace (issue 32): the ``io.brainhands.tool.workspace``
label (``rw``, ``ro``, optionally with a path; absent: no workspace), refused with the
label's name and what is allowed when malformed; and a dispatch whose mount differs from
its committed intent's is refused like any other difference."""

from __future__ import annotations

import pytest

from contracts import InvalidInput
from contracts.intent import Intent
from contracts.tool import Dispatch
from contracts.workspace import (
    DEFAULT_MOUNT,
    WorkspaceAccess,
    WorkspaceLimits,
    WorkspaceMode,
    WorkspaceMount,
)
from hands.labels import definition_from_labels

P = "io.brainhands.tool."
BASE = {
    P + "name": "coder",
    P + "version": "1",
    P + "schema": '{"type":"object"}',
    P + "replay": "safe",
    P + "timeout": "10",
}


def declared(value: str | None) -> WorkspaceAccess:
    labels = dict(BASE) if value is None else {**BASE, P + "workspace": value}
    return definition_from_labels("img", "sha256:0", labels).workspace


def test_without_the_label_a_tool_mounts_no_workspace() -> None:
    assert declared(None) == WorkspaceAccess()
    assert not declared(None).mounts
    assert declared("none") == WorkspaceAccess()


@pytest.mark.parametrize(
    ("value", "mode", "path"),
    [
        ("rw", WorkspaceMode.WRITE, DEFAULT_MOUNT),
        ("ro", WorkspaceMode.READ, DEFAULT_MOUNT),
        ("rw:/work", WorkspaceMode.WRITE, "/work"),
        (" ro:/srv/project ", WorkspaceMode.READ, "/srv/project"),
    ],
)
def test_the_label_names_the_mode_and_the_path(value: str, mode: WorkspaceMode, path: str) -> None:
    assert declared(value) == WorkspaceAccess(mode=mode, path=path)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("rx", "rw, ro or none"),
        ("write", "rw, ro or none"),
        ("rw:work", "absolute"),
        ("rw:/", "absolute"),
        ("rw:/a/../tmp", "normal"),
        ("rw:/work/", "normal"),
        ("rw:/tmp", "reserved"),
        ("rw:/proc/x", "reserved"),
        ("ro:/artifacts", "reserved"),
        ("rw:/dev", "reserved"),
        ("none:/work", "no path"),
        ("rw:/wo rk", "letters"),
    ],
)
def test_a_malformed_label_is_refused_naming_it(value: str, said: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        declared(value)
    assert refused.value.details["label"] == P + "workspace"
    assert P + "workspace" in refused.value.message and said in refused.value.message


def _dispatch(mount: WorkspaceMount | None) -> Dispatch:
    return Dispatch(
        operation_id="op-1",
        session_id="s1",
        task_id="t1",
        tool="coder",
        tool_version=1,
        args={},
        workspace=mount,
    )


def test_a_dispatch_whose_mount_differs_from_the_intent_is_refused() -> None:
    committed = Intent.of(_dispatch(WorkspaceMount(mode=WorkspaceMode.WRITE)))
    assert committed.differences(_dispatch(WorkspaceMount(mode=WorkspaceMode.WRITE))) == []
    other_mode = _dispatch(WorkspaceMount(mode=WorkspaceMode.READ))
    assert committed.differences(other_mode) == ["workspace mount"]
    bigger = WorkspaceMount(mode=WorkspaceMode.WRITE, limits=WorkspaceLimits(max_files=10**6))
    assert committed.differences(_dispatch(bigger)) == ["workspace mount"]
    assert committed.differences(_dispatch(None)) == ["workspace mount"]


def test_bh_tools_list_shows_how_each_tool_mounts_the_workspace() -> None:
    from bh.tools_commands import tools_table

    coder = definition_from_labels("img", "sha256:0", {**BASE, P + "workspace": "rw:/work"})
    plain = definition_from_labels("img", "sha256:0", BASE)
    table = tools_table([coder, plain])
    column = next(c for c in table.columns if c.header == "workspace")
    assert list(column.cells) == ["rw:/work", "none"]
