"""Changing a registered tool's network grant without rebuilding it (issue 14): over the
Hands API (admin scope, like registering), through ``bh tools grant`` directly or via the
API, recorded as a revision with who, when, what and why, shown by ``bh tools inspect
--history`` and ``GET /v1/tools/{name}/history`` — and used by the next run.

The API runs over real HTTP on a SQLite store with the process sandbox, as in
``test_hands_api``; the store semantics on every backend are in ``test_store_catalog``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bh import tools_commands
from bh.declared_tools import apply_declared
from contracts import AlreadyExists, ConflictError, InvalidInput, NotFound
from contracts.tool import ToolChange
from hands.api.views import RegisterRequest, checked
from hands.sandbox import RunOutcome, RunSpec
from hands.sandbox.output import Capture
from tests.integration.test_hands_api import MAIL, TOKEN, Api, LabelledSandbox, open_api
from tests.support.toolpath import runs

pytestmark = pytest.mark.sqlite


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path, None) as opened:
        yield opened


def grant(allow: list[str], **fields: Any) -> dict[str, Any]:
    return {"version": 1, "allow": allow, "reason": "the mail host moved", **fields}


async def test_a_grant_change_is_a_revision_the_history_shows(api: Api) -> None:
    changed = await api.http.post(
        "/v1/tools/act/grant", json=grant(["mail.internal:8025"], by="ada")
    )
    assert changed.status_code == 201, changed.text
    revision = changed.json()
    assert revision["change"] == "grant" and revision["by"] == "ada (token default)"
    assert revision["reason"] == "the mail host moved"
    assert revision["definition"]["network"]["allow"] == ["mail.internal:8025"]
    current = (await api.http.get("/v1/tools/act")).json()
    assert current["revision"] == 2 and current["network"]["allow"] == ["mail.internal:8025"]
    again = await api.http.post("/v1/tools/act/grant", json=grant(["mail.internal:8025"]))
    assert again.status_code == 200 and again.json() == revision  # already so: unchanged
    history = (await api.http.get("/v1/tools/act/history?version=1")).json()
    assert history["tool"] == "act@1"
    assert [(r["definition"]["revision"], r["change"]) for r in history["revisions"]] == [
        (1, "registered"),
        (2, "grant"),
    ]
    assert (await api.http.get("/v1/tools/act/history")).json() == history  # newest version


async def test_a_change_based_on_an_old_revision_is_a_conflict(api: Api) -> None:
    first = await api.http.post("/v1/tools/act/grant", json=grant(["a.internal:80"], revision=1))
    assert first.status_code == 201
    stale = await api.http.post("/v1/tools/act/grant", json=grant(["b.internal:80"], revision=1))
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "conflict"
    current = (await api.http.get("/v1/tools/act")).json()
    assert current["network"]["allow"] == ["a.internal:80"]


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/tools/nope/grant", grant(["a.internal:80"]), 404, None),
        ("/v1/tools/act/grant", grant(["a.internal:80"], version=2), 404, None),
        ("/v1/tools/act/grant", grant(["no-port"]), 422, "allow[0]"),
        ("/v1/tools/act/grant", grant(["*:80"]), 422, "allow[0]"),
        ("/v1/tools/act/grant", {"version": 1, "allow": []}, 422, "reason"),
        ("/v1/tools/act/grant", grant([], reason=""), 422, "reason"),
        ("/v1/tools/act/grant", {"version": 1, "reason": "x"}, 422, "allow"),
        ("/v1/tools/act/grant", grant([], extra=1), 422, "extra"),
    ],
)
async def test_a_bad_grant_changes_nothing(
    api: Api, path: str, body: Any, status: int, field: str | None
) -> None:
    response = await api.http.post(path, json=body)
    assert response.status_code == status, response.text
    if field is not None:
        assert response.json()["error"]["details"]["field"].startswith(field)
    assert len(await api.store.tools.history("act", 1)) == 1


async def test_an_unknown_tool_has_no_history(api: Api) -> None:
    for path in ("/v1/tools/nope/history", "/v1/tools/act/history?version=2"):
        response = await api.http.get(path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


async def test_the_next_run_uses_the_current_revision(api: Api) -> None:
    seen: list[RunSpec] = []
    run = api.sandbox.run

    async def recorded(
        spec: RunSpec, *, log: Capture | None = None, guard: Any = None
    ) -> RunOutcome:
        seen.append(spec)
        return await run(spec, log=log, guard=guard)

    api.sandbox.run = recorded  # type: ignore[method-assign]
    await api.run("op-1")
    await api.store.tools.grant(
        "act",
        1,
        seen[0].tool.network.model_copy(update={"allow": ("m.internal:25",)}),
        by="ada",
        reason="moved",
    )
    await api.run("op-2")
    assert [(s.tool.revision, s.tool.network.allow) for s in seen] == [
        (1, ()),
        (2, ("m.internal:25",)),
    ]
    assert runs(api.ledger) == ["op-1", "op-2"]


async def test_a_rebuilt_image_of_the_same_recipe_registers_as_a_revision(api: Api) -> None:
    created = await api.http.post("/v1/tools", json={"image": "test/built:1"})
    assert created.status_code == 201 and created.json()["revision"] == 1
    rebuilt = await api.http.post("/v1/tools", json={"image": "test/built:rebuilt"})
    assert rebuilt.status_code == 201, rebuilt.text
    assert (rebuilt.json()["revision"], rebuilt.json()["image_id"]) == (2, "sha256:" + "5" * 64)
    changed = await api.http.post("/v1/tools", json={"image": "test/built:changed"})
    assert changed.status_code == 409 and "another recipe" in changed.json()["error"]["message"]
    async with api.client() as hands:
        again = await hands.register_tool("test/built:rebuilt")
        assert not again.created and again.tool.revision == 2
        revision = await hands.grant_tool(
            "built", 1, allow=["a.internal:80"], by="ada", reason="needs it"
        )
        assert revision.change is ToolChange.GRANT and revision.definition.revision == 3
        with pytest.raises(ConflictError):
            await hands.grant_tool("built", 1, allow=[], by="bob", reason="x", revision=2)
        with pytest.raises(NotFound):
            await hands.grant_tool("nope", 1, allow=[], by="bob", reason="x")
        with pytest.raises(InvalidInput):
            await hands.grant_tool("built", 1, allow=["bad"], by="bob", reason="x")
        history = await hands.tool_history("built", 1)
        assert [r.change for r in history.revisions] == [
            ToolChange.REGISTERED,
            ToolChange.REBUILT,
            ToolChange.GRANT,
        ]


def _cli(*args: str, **env: str | None) -> Any:
    return CliRunner().invoke(tools_commands.app, list(args), env={"COLUMNS": "200", **env})


@pytest.mark.parametrize("through", ["api", "store"])
async def test_the_cli_changes_a_grant_and_shows_the_history(
    api: Api, tmp_path: Path, through: str
) -> None:
    env: dict[str, str | None] = (
        {"BH_HANDS_API_URL": api.url, "BH_HANDS_API_TOKEN": TOKEN, "BH_STORE_URL": None}
        if through == "api"
        else {"BH_HANDS_API_URL": None, "BH_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    )
    changed = await asyncio.to_thread(
        _cli,
        "grant",
        "act@1",
        "--allow",
        "m.internal:25",
        "--by",
        "ada",
        "--reason",
        "typo",
        **env,
    )
    assert changed.exit_code == 0, changed.output
    assert "act@1 revision 2" in changed.output and "m.internal:25" in changed.output
    shown = await asyncio.to_thread(_cli, "inspect", "act", "--history", **env)
    assert shown.exit_code == 0, shown.output
    assert "grant" in shown.output and "typo" in shown.output and "ada" in shown.output
    as_json = await asyncio.to_thread(_cli, "inspect", "act", "--history", "--json", **env)
    revisions = json.loads(as_json.output)["revisions"]
    assert [r["change"] for r in revisions] == ["registered", "grant"]
    current = await asyncio.to_thread(_cli, "inspect", "act", **env)
    assert json.loads(current.output)["network"]["allow"] == ["m.internal:25"]
    revoked = await asyncio.to_thread(
        _cli, "grant", "act@1", "--none", "--by", "ada", "--reason", "off", **env
    )
    assert revoked.exit_code == 0, revoked.output
    tool = await api.store.tools.get("act", 1)
    assert tool is not None and tool.network.is_none and tool.revision == 3


@pytest.mark.parametrize("through", ["api", "store"])
async def test_the_cli_registers_an_image_naming_destinations_with_no_network(
    api: Api, tmp_path: Path, through: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31, finding 4: the image's network label is shown with how to grant it,
    never granted by registering."""
    env: dict[str, str | None] = (
        {"BH_HANDS_API_URL": api.url, "BH_HANDS_API_TOKEN": TOKEN, "BH_STORE_URL": None}
        if through == "api"
        else {"BH_HANDS_API_URL": None, "BH_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"}
    )
    if through == "store":  # this machine's engine, knowing the test images' labels

        async def labelled(*_: object) -> LabelledSandbox:
            return LabelledSandbox(tmp_path / "runs")

        monkeypatch.setattr(tools_commands, "make_sandbox", labelled)
    registered = await asyncio.to_thread(_cli, "register", "test/mailer:1", **env)
    assert registered.exit_code == 0, registered.output
    assert "mailer@1 registered" in registered.output
    assert f"image declares network {MAIL}; not granted" in registered.output
    assert f"bh tools grant mailer@1 --allow {MAIL}" in registered.output
    tool = await api.store.tools.get("mailer", 1)
    assert tool is not None and tool.network.is_none
    as_json = await asyncio.to_thread(_cli, "register", "test/mailer:1", "--json", **env)
    assert as_json.exit_code == 0, as_json.output
    shown = json.loads(as_json.output)
    assert shown["tool"]["network"]["allow"] == [] and shown["ungranted"] == [MAIL]
    assert len(await api.store.tools.history("mailer", 1)) == 1  # no grant, not even briefly


def _declared(**fields: Any) -> RegisterRequest:
    return checked(
        RegisterRequest, {"image": "test/mailer:1", "registered_by": "bh init", **fields}
    )


async def test_a_declared_entry_is_registered_with_its_grant_in_one_step(api: Api) -> None:
    """``bh init --tools``: an entry without ``allow`` registers with no network (no
    revision 2 revoking a grant the image's label gave for a moment); another grant is
    applied before registering again; another config is refused before anything."""
    applied = await apply_declared(api.store, api.sandbox, _declared(), reason="declared")
    assert (applied.change, applied.tool.network.allow) == ("registered", ())
    assert f"image declares network {MAIL}; not granted" in applied.line()
    assert [r.change for r in await api.store.tools.history("mailer", 1)] == [ToolChange.REGISTERED]
    moved = await apply_declared(api.store, api.sandbox, _declared(allow=[MAIL]), reason="r")
    assert (moved.change, moved.tool.network.allow) == ("granted", (MAIL,))
    assert "not granted" not in moved.line()
    again = await apply_declared(api.store, api.sandbox, _declared(allow=[MAIL]), reason="r")
    assert (again.change, again.tool.revision) == ("unchanged", 2)
    with pytest.raises(AlreadyExists, match="config"):
        await apply_declared(api.store, api.sandbox, _declared(config={"K": "v"}), reason="r")
    assert len(await api.store.tools.history("mailer", 1)) == 2  # refused: nothing granted


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("act", "--allow", "a:1"), "NAME@VERSION"),
        (("act@x", "--allow", "a:1"), "NAME@VERSION"),
        (("act@1",), "--allow"),
        (("act@1", "--none", "--allow", "a:1"), "--none"),
        (("act@1", "--allow", "no-port"), "'no-port'"),
        (("nope@1", "--allow", "a:1"), "nope@1 is not registered"),
    ],
)
async def test_the_cli_refuses_a_bad_grant_in_one_line(
    api: Api, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    done = await asyncio.to_thread(
        _cli,
        "grant",
        *args,
        "--by",
        "ada",
        "--reason",
        "r",
        "--store",
        store,
        BH_HANDS_API_URL=None,
    )
    assert done.exit_code == 2, done.output
    assert message in done.output and "Traceback" not in done.output
    assert len(await api.store.tools.history("act", 1)) == 1
