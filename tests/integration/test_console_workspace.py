"""The console's Workspace tab over HTTP (issue 32, part D): a version's file tree, a
file's view (text escaped, binary offered for download), a diff between two versions,
an operation's artifacts — behind the login cookie and the token's sessions. Versions
are built directly in the store (``tests.support.workspaces``)."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from tests.integration.test_console import browser
from tests.integration.test_session_api import Api, open_api
from tests.integration.test_workspace_api import FIXED, TREE
from tests.support.workspaces import apply_version
from webapi.auth import Grant

pytestmark = pytest.mark.sqlite

ACME = "acme-token-0123456789abcdef"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    acme = Grant(name="acme", token=SecretStr(ACME), access="read", tenants=("acme",))
    async with open_api(tmp_path, tokens=(acme,)) as opened:
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


async def test_the_session_page_links_its_workspace_and_the_tab_shows_the_tree(api: Api) -> None:
    async with browser(api) as client:
        session = await client.get("/console/sessions/w1")
        assert 'href="/console/sessions/w1/workspace"' in session.text
        page = await client.get("/console/sessions/w1/workspace")
        assert page.status_code == 200, page.text
        text = page.text
        for path in FIXED:
            assert f'data-path="{path}"' in text, path
        assert '<option value="2" selected>' in text and '<option value="1">' in text
        assert "→ ../../../etc/passwd" in text  # a link is drawn with its target
        link = await client.get("/console/sessions/w1/workspace", params={"path": "escape"})
        assert "<code>../../../etc/passwd</code> (a link; not followed)" in link.text
        first = (await client.get("/console/sessions/w1/workspace", params={"at": 1})).text
        assert 'data-path="NOTES.txt"' not in first and '<option value="1" selected>' in first


async def test_a_file_is_shown_escaped_and_a_binary_one_offered_for_download(api: Api) -> None:
    async with browser(api) as client:
        where = "/console/sessions/w1/workspace"
        calc = await client.get(where, params={"at": 1, "path": "pkg/./calc.py"})
        assert calc.status_code == 200 and "return a - b" in calc.text
        script = (await client.get(where, params={"path": "page.html"})).text
        assert "<script>alert" not in script
        assert html.escape("<script>alert(document.cookie)</script>", quote=False) in script
        binary = (await client.get(where, params={"path": "data.bin"})).text
        link = "/v1/sessions/w1/workspace/files/data.bin?at=2"
        assert "binary" in binary and f'href="{link}"' in binary
        got = await client.get(link)  # the login cookie reads the API's bytes too
        assert got.status_code == 200 and got.content == FIXED["data.bin"]
        folder = (await client.get(where, params={"path": "pkg"})).text
        assert 'href="/console/sessions/w1/workspace?at=2&amp;path=pkg/calc.py"' in folder
        outside = await client.get(where, params={"path": "../x"})
        assert outside.status_code == 422 and "root" in outside.text
        missing = await client.get(where, params={"path": "nope.txt"})
        assert missing.status_code == 404 and "nope.txt" in missing.text


async def test_a_diff_between_two_versions(api: Api) -> None:
    async with browser(api) as client:
        page = await client.get("/console/sessions/w1/workspace/diff")
        assert page.status_code == 200, page.text
        text = page.text
        assert 'class="change added"' in text and "NOTES.txt" in text
        assert 'class="change changed"' in text and "pkg/calc.py" in text
        assert "+    return a + b" in text and "-    return a - b" in text
        same = (await client.get("/console/sessions/w1/workspace/diff?from=2&to=2")).text
        assert "no path changed" in same


async def test_an_operation_page_lists_its_artifacts_with_download_links(api: Api) -> None:
    async with browser(api) as client:
        page = (await client.get("/console/operations/op-write-2")).text
        link = "/v1/sessions/w1/artifacts/op-write-2/report.txt"
        assert f'href="{link}"' in page and "patch.diff" in page
        got = await client.get(link)
        assert got.status_code == 200 and got.content == b"2 passed\n"
        none = (await client.get("/console/operations/op-write-1")).text
        assert "report.txt" not in none


async def test_a_session_without_a_workspace_says_so(api: Api) -> None:
    await api.submit("r1", "hi")
    async with browser(api) as client:
        page = await client.get("/console/sessions/s1/workspace")
        assert page.status_code == 200 and "no workspace yet" in page.text
        diff = await client.get("/console/sessions/s1/workspace/diff")
        assert diff.status_code == 200 and "no workspace yet" in diff.text


async def test_another_tenants_token_reaches_no_workspace(api: Api) -> None:
    async with browser(api, ACME) as client:
        for path in (
            "/console/sessions/w1/workspace",
            "/console/sessions/w1/workspace?path=pkg/calc.py",
            "/console/sessions/w1/workspace/diff",
            "/v1/sessions/w1/workspace/files/pkg/calc.py",
        ):
            refused = await client.get(path)
            assert refused.status_code in (403, 404), (path, refused.status_code)
            assert "return a" not in refused.text, path
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        sent = await anonymous.get("/console/sessions/w1/workspace")
        assert sent.status_code == 303 and sent.headers["location"] == "/console/login"
