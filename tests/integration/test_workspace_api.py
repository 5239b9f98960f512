"""Reading workspaces and artifacts through the Session API over real HTTP (issue 32,
part D): uvicorn on a loopback port over a SQLite store, versions built directly in the
store (``tests.support.workspaces``), read with raw HTTP, the client and ``bh``."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from bh.cli import app as bh_app
from contracts import InvalidInput, NotFound
from session_store import open_store
from tests.integration.test_session_api import TOKEN, Api, open_api
from tests.support.workspaces import Dir, File, Link, apply_version, record_result
from webapi.auth import Access, Grant

pytestmark = pytest.mark.sqlite

TREE = {
    "pkg": Dir(),
    "pkg/__init__.py": b"",
    "pkg/calc.py": b"def add(a, b):\n    return a - b\n",
    "README.md": b"# calc\n",
    "run.sh": File(b"#!/bin/sh\npytest -q\n", mode=0o755),
    "latest": Link("pkg/calc.py"),
    "escape": Link("../../../etc/passwd"),
    "page.html": b"<script>alert(document.cookie)</script>",
    "data.bin": b"\0\1\2\3",
}
FIXED = {**TREE, "pkg/calc.py": b"def add(a, b):\n    return a + b\n", "NOTES.txt": b"fixed\n"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as opened:
        store = opened.k.store
        await apply_version(store, "w1", TREE, operation_id="op-write-1")
        await apply_version(
            store,
            "w1",
            FIXED,
            operation_id="op-write-2",
            artifacts={"report.txt": b"2 passed\n", "patch.diff": b"-a - b\n+a + b\n"},
        )
        yield opened


async def test_the_workspace_reads_as_of_any_commit(api: Api) -> None:
    latest = await api.http.get("/v1/sessions/w1/workspace")
    assert latest.status_code == 200, latest.text
    view = latest.json()
    assert view["seq"] == 2 and view["version"]["files"] == 7
    first = (await api.http.get("/v1/sessions/w1/workspace", params={"at": 1})).json()
    assert view["version"]["base"] == first["version"]["id"] != view["version"]["id"]
    assert [e["path"] for e in first["entries"]] == sorted(TREE)
    link = next(e for e in view["entries"] if e["path"] == "latest")
    assert link["kind"] == "link" and link["target"] == "pkg/calc.py"

    past = await api.http.get("/v1/sessions/w1/workspace", params={"at": 3})
    assert past.status_code == 404 and "has 2 commits, not 3" in past.json()["error"]["message"]
    await api.submit("r1", "hello", session="plain")
    empty = await api.http.get("/v1/sessions/plain/workspace")
    assert empty.status_code == 404
    assert "no workspace as of commit 1" in empty.json()["error"]["message"]
    nobody = await api.http.get("/v1/sessions/nobody/workspace")
    assert nobody.status_code == 404 and nobody.json()["error"]["code"] == "not_found"
    assert (await api.http.get("/v1/sessions/w1/workspace?at=0")).status_code == 422


async def test_a_file_is_its_bytes_a_directory_its_listing_a_link_its_target(api: Api) -> None:
    calc = await api.http.get("/v1/sessions/w1/workspace/files/pkg/calc.py", params={"at": 1})
    assert calc.status_code == 200 and calc.content == TREE["pkg/calc.py"]
    assert calc.headers["content-type"].startswith("text/x-python")
    assert calc.headers["x-workspace-entry"] == "file"
    assert calc.headers["x-workspace-mode"] == "0644" and calc.headers["x-workspace-seq"] == "1"
    assert calc.headers["etag"] == f'"{hashlib.sha256(TREE["pkg/calc.py"]).hexdigest()}"'
    script = await api.http.get("/v1/sessions/w1/workspace/files/run.sh")
    assert script.headers["x-workspace-mode"] == "0755"
    data = await api.http.get("/v1/sessions/w1/workspace/files/data.bin")
    assert data.headers["content-type"] == "application/octet-stream"

    # a session's bytes never run in the API's origin, where the console's cookie reads
    page = await api.http.get("/v1/sessions/w1/workspace/files/page.html")
    assert page.content == TREE["page.html"]
    assert page.headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["content-disposition"] == "attachment; filename*=UTF-8''page.html"

    listing = await api.http.get("/v1/sessions/w1/workspace/files/pkg")
    assert listing.headers["x-workspace-entry"] == "dir"
    assert [e["path"] for e in listing.json()["entries"]] == ["pkg/__init__.py", "pkg/calc.py"]
    escape = await api.http.get("/v1/sessions/w1/workspace/files/escape")
    assert escape.headers["x-workspace-entry"] == "link"
    assert escape.json()["target"] == "../../../etc/passwd" and "root:" not in escape.text

    missing = await api.http.get("/v1/sessions/w1/workspace/files/pkg/nope.py")
    assert missing.status_code == 404 and "'pkg/nope.py' is not in" in missing.text
    gone = await api.http.get("/v1/sessions/w1/workspace/files/NOTES.txt", params={"at": 1})
    assert gone.status_code == 404
    # raw paths, as a hostile client sends them (httpx would resolve the dots itself)
    for raw in ("%2e%2e/%2e%2e/etc/passwd", "pkg/%2e%2e/%2e%2e/x", "%2Fetc%2Fpasswd"):
        refused = await api.http.get(f"/v1/sessions/w1/workspace/files/{raw}")
        assert refused.status_code == 422, (raw, refused.text)
        assert refused.json()["error"]["details"]["field"] == "path"


async def test_the_tarball_is_the_tree_with_links_as_links_and_modes(api: Api) -> None:
    response = await api.http.get("/v1/sessions/w1/workspace.tar", params={"at": 1})
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
    assert "w1-1.tar" in response.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:") as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert sorted(members) == sorted(TREE)
        assert members["run.sh"].mode == 0o755 and members["pkg"].isdir()
        assert members["escape"].issym() and members["escape"].linkname == "../../../etc/passwd"
        calc = archive.extractfile("pkg/calc.py")
        assert calc is not None and calc.read() == TREE["pkg/calc.py"]
    async with api.client() as client:
        into = io.BytesIO()
        got = await client.workspace_tar("w1", into=into)
        assert got.seq == 2 and got.size == len(into.getvalue())
        with tarfile.open(fileobj=io.BytesIO(into.getvalue()), mode="r:") as archive:
            notes = archive.extractfile("NOTES.txt")
            assert notes is not None and notes.read() == b"fixed\n"
    assert (await api.http.get("/v1/sessions/plain/workspace.tar")).status_code == 404


async def test_the_versions_and_a_diff_between_two_commits(api: Api) -> None:
    versions = (await api.http.get("/v1/sessions/w1/workspace/versions")).json()["versions"]
    assert [(v["seq"], v["operation_id"]) for v in versions] == [
        (1, "op-write-1"),
        (2, "op-write-2"),
    ]
    assert versions[1]["version"]["base"] == versions[0]["version"]["id"]

    diff = await api.http.get("/v1/sessions/w1/workspace/diff", params={"from": 1, "to": 2})
    assert diff.status_code == 200, diff.text
    changes = {c["path"]: c for c in diff.json()["changes"]}
    assert {path: c["change"] for path, c in changes.items()} == {
        "NOTES.txt": "added",
        "pkg/calc.py": "changed",
    }
    assert "-    return a - b\n+    return a + b\n" in changes["pkg/calc.py"]["diff"]
    latest = (await api.http.get("/v1/sessions/w1/workspace/diff?from=2")).json()
    assert latest["to_seq"] == 2 and latest["changes"] == []
    missing = await api.http.get("/v1/sessions/w1/workspace/diff")
    assert missing.status_code == 422 and missing.json()["error"]["details"]["field"] == "from"
    assert (await api.http.get("/v1/sessions/w1/workspace/diff?from=9")).status_code == 404


async def test_artifacts_are_listed_and_downloaded_only_through_their_session(api: Api) -> None:
    await record_result(api.k.store, "other", "op-other", artifacts={"secret.txt": b"no"})
    listed = (await api.http.get("/v1/sessions/w1/artifacts")).json()["artifacts"]
    assert [(a["operation_id"], a["name"], a["size"]) for a in listed] == [
        ("op-write-2", "report.txt", 9),
        ("op-write-2", "patch.diff", 14),
    ]
    report = await api.http.get("/v1/sessions/w1/artifacts/op-write-2/report.txt")
    assert report.status_code == 200 and report.content == b"2 passed\n"
    assert report.headers["content-type"].startswith("text/plain")
    assert report.headers["content-security-policy"] == "default-src 'none'; sandbox"
    theirs = await api.http.get("/v1/sessions/w1/artifacts/op-other/secret.txt")
    assert theirs.status_code == 404 and "no operation 'op-other'" in theirs.text
    unknown = await api.http.get("/v1/sessions/w1/artifacts/op-write-2/nope.txt")
    assert unknown.status_code == 404 and "no artifact 'nope.txt'" in unknown.text
    bad = await api.http.get("/v1/sessions/w1/artifacts/op-write-2/.hidden")
    assert bad.status_code == 422


async def test_the_openapi_document_lists_the_workspace_routes(api: Api) -> None:
    paths = (await api.http.get("/openapi.json")).json()["paths"]
    for path in (
        "/v1/sessions/{session_id}/workspace",
        "/v1/sessions/{session_id}/workspace/files/{path}",
        "/v1/sessions/{session_id}/workspace.tar",
        "/v1/sessions/{session_id}/workspace/versions",
        "/v1/sessions/{session_id}/workspace/diff",
        "/v1/sessions/{session_id}/artifacts",
        "/v1/sessions/{session_id}/artifacts/{operation_id}/{name}",
    ):
        assert paths[path]["get"]["security"] == [{"HTTPBearer": []}], path
        assert "404" in paths[path]["get"]["responses"], path
    retention = paths["/v1/sessions/{session_id}/retention"]["put"]
    assert retention["security"] == [{"HTTPBearer": []}] and "404" in retention["responses"]
    tar = paths["/v1/sessions/{session_id}/workspace.tar"]["get"]["responses"]["200"]
    assert "application/x-tar" in tar["content"]


async def test_the_client_checks_a_path_before_it_is_sent(api: Api) -> None:
    async with api.client() as client:
        with pytest.raises(InvalidInput, match="leaves the workspace's root"):
            await client.workspace_path("w1", "pkg/../../x", into=io.BytesIO())
        with pytest.raises(NotFound, match="'plain-never' has no commits"):
            await client.workspace("plain-never")  # the API's own words
        into = io.BytesIO()
        got = await client.workspace_path("w1", "pkg/./calc.py", into=into, at=1)
        assert got.path == "pkg/calc.py" and got.mode == 0o644 and got.seq == 1
        assert into.getvalue() == TREE["pkg/calc.py"] and got.digest is not None


async def test_bh_reads_the_workspace_and_its_artifacts(api: Api, tmp_path: Path) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN, "COLUMNS": "200"}
    runner = CliRunner()

    async def bh(*args: str) -> Any:
        return await asyncio.to_thread(runner.invoke, bh_app, list(args), env=env)

    listed = await bh("workspace", "ls", "w1", "--at", "1")
    assert listed.exit_code == 0, listed.output
    assert "as of commit 1" in listed.output and "6 files" in listed.output
    assert "latest -> pkg/calc.py" in listed.output and "0755" in listed.output

    shown = await bh("workspace", "get", "w1", "pkg/calc.py")
    assert shown.exit_code == 0 and shown.stdout_bytes == FIXED["pkg/calc.py"]
    target = tmp_path / "calc.py"
    saved = await bh("workspace", "get", "w1", "pkg/calc.py", "--at", "1", "-o", str(target))
    assert saved.exit_code == 0 and target.read_bytes() == TREE["pkg/calc.py"]
    assert "as of commit 1" in saved.stderr
    link = await bh("workspace", "get", "w1", "escape")
    assert "escape -> ../../../etc/passwd (a link; not followed)" in link.output
    folder = await bh("workspace", "get", "w1", "pkg")
    assert "pkg/calc.py" in folder.output

    tarball = tmp_path / "w1.tar"
    got = await bh("workspace", "get", "w1", "--tar", "-o", str(tarball))
    assert got.exit_code == 0, got.output
    with tarfile.open(tarball) as archive:
        assert sorted(archive.getnames()) == sorted(FIXED)

    lost = tmp_path / "lost.txt"
    refused = await bh("workspace", "get", "w1", "nope.txt", "-o", str(lost))
    assert refused.exit_code == 2 and "not_found: 'nope.txt' is not in" in refused.stderr
    left = await asyncio.to_thread(lambda: list(tmp_path.glob("*lost*")))
    assert left == []  # nothing partial left behind
    outside = await bh("workspace", "get", "w1", "../x")
    assert outside.exit_code == 2 and "invalid_input" in outside.stderr

    diffed = await bh("workspace", "diff", "w1", "--from", "1")
    assert diffed.exit_code == 0, diffed.output
    assert "A NOTES.txt" in diffed.output and "M pkg/calc.py" in diffed.output
    assert "+    return a + b" in diffed.output
    as_json = json.loads((await bh("workspace", "diff", "w1", "--from", "1", "--json")).output)
    assert as_json["from_seq"] == 1 and len(as_json["changes"]) == 2
    versions = await bh("workspace", "versions", "w1")
    assert "op-write-1" in versions.output and "op-write-2" in versions.output
    each = await bh("workspace", "versions", "w1", "--diff")
    assert each.exit_code == 0, each.output
    # each version's change in turn: the first adds the file, the second changes it
    assert 0 < each.output.index("A pkg/calc.py") < each.output.index("M pkg/calc.py")
    documents = json.loads((await bh("workspace", "versions", "w1", "--diff", "--json")).output)
    assert [d["to_seq"] for d in documents["diffs"]] == [v["seq"] for v in documents["versions"]]

    artifacts = await bh("artifacts", "ls", "w1")
    assert "report.txt" in artifacts.output and "patch.diff" in artifacts.output
    report = await bh("artifacts", "get", "w1", "op-write-2", "report.txt")
    assert report.exit_code == 0 and report.stdout_bytes == b"2 passed\n"
    none = await bh("artifacts", "get", "w1", "op-write-1", "report.txt")
    assert none.exit_code == 2 and "no artifact 'report.txt'" in none.stderr
    bad = await bh("artifacts", "get", "w1", "op/x", "report.txt")
    assert bad.exit_code == 2 and "operation id" in bad.output


async def test_a_retention_is_set_shown_cleared_and_kept_by_collection(
    api: Api, tmp_path: Path
) -> None:
    store = api.k.store
    await apply_version(store, "w1", {**FIXED, "THIRD.txt": b"3\n"}, operation_id="op-write-3")
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == {"keep_versions": 10}

    one = {"retention": {"keep_versions": 1}}
    put = await api.http.put("/v1/sessions/w1/retention", json=one)
    assert put.status_code == 200 and put.json() == one, put.text
    head = (await store.session("w1")).state.seq
    await api.http.put("/v1/sessions/w1/retention", json=one)
    assert (await store.session("w1")).state.seq == head  # said once
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == one["retention"]
    for wrong in ({"keep_versions": 0}, {"keep_versions": "many"}, {"keep": 1}):
        refused = await api.http.put("/v1/sessions/w1/retention", json={"retention": wrong})
        assert refused.status_code == 422 and "retention" in refused.text, refused.text
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == one["retention"]

    # a collector without a grace period (no writer runs here) keeps only the head's version
    collector = await open_store(f"sqlite:///{tmp_path}/kernel.db", workspace_grace_seconds=0)
    try:
        collected = await collector.workspaces.collect("w1")
    finally:
        await collector.close()
    assert collected.versions == 2 and collected.blobs >= 1, collected
    head_file = await api.http.get("/v1/sessions/w1/workspace/files/THIRD.txt")
    assert head_file.status_code == 200 and head_file.content == b"3\n"
    first = await api.http.get("/v1/sessions/w1/workspace", params={"at": 1})
    assert first.status_code == 404, first.text

    cleared = await api.http.put("/v1/sessions/w1/retention", json={"retention": None})
    assert cleared.status_code == 200 and cleared.json() == {"retention": None}
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == {"keep_versions": 10}


async def test_only_an_operator_of_the_session_sets_its_retention(tmp_path: Path) -> None:
    reader, other = "reader-token-0123456789abcdef", "other-token-0123456789abcdef"
    grants = [
        Grant(name="reader", token=SecretStr(reader), access=Access.READ),
        Grant(name="other", token=SecretStr(other), access=Access.OPERATE, sessions=("o-",)),
    ]
    async with open_api(tmp_path, tokens=grants) as opened:
        for token in (reader, other):
            refused = await opened.http.put(
                "/v1/sessions/w1/retention",
                json={"retention": {"keep_versions": 1}},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert refused.status_code == 403, refused.text
        state = (await opened.k.store.session("w1")).state
        assert state.seq == 0  # nothing written


async def test_bh_sets_a_sessions_retention(api: Api) -> None:
    env = {"BH_SESSION_API_URL": api.url, "BH_SESSION_API_TOKEN": TOKEN}
    runner = CliRunner()

    async def bh(*args: str) -> Any:
        return await asyncio.to_thread(runner.invoke, bh_app, list(args), env=env)

    kept = await bh("workspace", "retention", "w1", "--keep", "3")
    assert kept.exit_code == 0, kept.output
    assert "w1: keeps its latest 3 versions" in kept.output
    shown = await bh("show", "w1")
    assert shown.exit_code == 0 and "keeps 3 workspace versions" in shown.output, shown.output
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == {"keep_versions": 3}
    cleared = await bh("workspace", "retention", "w1", "--clear")
    assert cleared.exit_code == 0 and "(the default)" in cleared.output, cleared.output
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == {"keep_versions": 10}
    assert "workspace versions" not in (await bh("show", "w1")).output  # the default
    for wrong in ([], ["--keep", "2", "--clear"], ["--keep", "0"]):
        refused = await bh("workspace", "retention", "w1", *wrong)
        assert refused.exit_code == 2, refused.output
    assert (await api.http.get("/v1/sessions/w1")).json()["retention"] == {"keep_versions": 10}
