"""``bh tools``: register tool images, list and inspect registered definitions, change
a registered tool's network grant and show its revisions.

Through the Hands API when ``--api-url`` / ``BH_HANDS_API_URL`` is set (the image must
be on the API host's engine); otherwise directly: the store at ``--store`` /
``BH_STORE_URL`` and this machine's container engine (the sandbox ``BH_HANDS_SANDBOX``
selects, Docker by default) — so a laptop registers without running the API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Annotated, TypeVar

import typer
from rich.table import Table

from bh.api_client import print_json, run
from bh.hands_client import HandsClient, Registration
from bh.ops_commands import ApiToken, ApiUrl, Json, console
from contracts import InvalidInput, NotFound
from contracts.tool import ToolDefinition, ToolRevision
from hands.api.registration import register_request, request_of, ungranted_notice
from hands.api.views import GrantRequest, ToolHistory, ToolList, checked
from hands.app import make_sandbox
from hands.settings import HandsSettings
from session_store import SessionStore, open_store

_T = TypeVar("_T")

app = typer.Typer(help="Register and inspect tool images.", no_args_is_help=True)

StoreUrl = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="BH_STORE_URL",
        show_envvar=True,
        help="Session Store URL (used when no Hands API URL is set).",
    ),
]


@app.command()
def register(
    image: Annotated[str, typer.Argument(help="A local image tag or id.")],
    allow: Annotated[
        list[str] | None,
        typer.Option(metavar="HOST:PORT", help="Grant egress to this destination (repeat)."),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY=VALUE", help="A non-secret setting for its containers."),
    ] = None,
    store: StoreUrl = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Register IMAGE by the labels it declares (same image again: nothing changes),
    granted only the --allow destinations: none means no network, whatever the image's
    network label names (shown, with how to grant it)."""
    settings = parse_config(config or [])
    if api_url:
        registration = run(_register_via_api(api_url, token, image, allow or [], settings))
    else:
        registration = run(_register_directly(store, image, allow or [], settings))
    if as_json:
        print_json(registration)
        return
    tool = registration.tool
    if not registration.created:
        what = f"already registered (unchanged, revision {tool.revision})"
    elif tool.revision > 1:
        what = f"rebuilt from the same recipe: revision {tool.revision} runs the new image"
    else:
        what = "registered"
    allowed = ", ".join(tool.network.allow) or "no network"
    console.print(
        f"{tool.ref} {what}: {tool.image} ({tool.image_id}), allows {allowed}", soft_wrap=True
    )
    if registration.ungranted:
        console.print(ungranted_notice(tool, registration.ungranted), soft_wrap=True)


@app.command(name="list")
def list_(
    store: StoreUrl = None, api_url: ApiUrl = None, token: ApiToken = None, as_json: Json = False
) -> None:
    """List registered tools, by name, then version."""
    catalog = _Catalog(api_url, token, store)
    definitions = run(catalog.ask(lambda hands: hands.tools(), lambda s: s.tools.definitions()))
    if as_json:
        print_json(ToolList(tools=definitions))
        return
    console.print(tools_table(definitions))


@app.command()
def inspect(
    name: Annotated[str, typer.Argument(help="The tool's name.")],
    version: Annotated[int | None, typer.Option(min=1, help="Default: the newest.")] = None,
    history: Annotated[
        bool, typer.Option("--history", help="Show every revision: who changed what, why.")
    ] = False,
    store: StoreUrl = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Show one definition as the Hands run it now (JSON), or its revisions."""
    catalog = _Catalog(api_url, token, store)
    if not history:
        current = catalog.ask(
            lambda hands: hands.tool(name, version), lambda s: _registered(s, name, version)
        )
        print_json(run(current))
        return
    revisions = run(catalog.history(name, version))
    if as_json:
        print_json(revisions)
        return
    console.print(history_table(revisions))


@app.command()
def grant(
    tool: Annotated[str, typer.Argument(metavar="NAME@VERSION", help="A registered tool.")],
    by: Annotated[str, typer.Option(help="Who makes the change (recorded).")],
    reason: Annotated[str, typer.Option(help="Why (recorded).")],
    allow: Annotated[
        list[str] | None,
        typer.Option(metavar="HOST:PORT", help="Allow this destination (repeat); replaces all."),
    ] = None,
    none: Annotated[bool, typer.Option("--none", help="Allow no network at all.")] = False,
    if_revision: Annotated[
        int | None, typer.Option(min=1, help="Refuse unless this is still the current revision.")
    ] = None,
    store: StoreUrl = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Change what a registered tool may reach, without a new image or version; recorded
    as a revision (``bh tools inspect NAME --history``), used by the next run."""
    name, version = parse_ref(tool)
    if bool(allow) == none:
        raise typer.BadParameter("give the destinations with --allow, or --none for no network")
    fields = {"version": version, "allow": allow or [], "reason": reason, "by": by}
    if if_revision is not None:
        fields["revision"] = if_revision
    revision = run(_Catalog(api_url, token, store).grant(name, fields))
    if as_json:
        print_json(revision)
        return
    allowed = ", ".join(revision.definition.network.allow) or "no network"
    console.print(
        f"{revision.definition.ref} revision {revision.rev} ({revision.change.value} by "
        f"{revision.by}): allows {allowed}",
        soft_wrap=True,
    )


def parse_ref(ref: str) -> tuple[str, int]:
    """``NAME@VERSION`` as its parts."""
    name, _, version = ref.rpartition("@")
    if not name or not version.isdigit() or int(version) < 1:
        raise typer.BadParameter(
            f"{ref!r} is not NAME@VERSION (e.g. send_email@1)", param_hint="NAME@VERSION"
        )
    return name, int(version)


def parse_config(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` options as a mapping (the value may contain ``=``)."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--config")
        parsed[key] = value
    return parsed


def tools_table(definitions: list[ToolDefinition]) -> Table:
    table = Table(title="tools")
    columns = (
        "tool",
        "rev",
        "replay",
        "timeout",
        "network",
        "query",
        "workspace",
        "image",
        "registered",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for tool in definitions:
        table.add_row(
            tool.ref,
            str(tool.revision),
            tool.replay.value,
            f"{tool.timeout_s:g} s",
            ", ".join(tool.network.allow) or "none",
            "yes" if tool.queryable else "no",
            workspace_of(tool),
            f"{tool.image} ({_short(tool.image_id)})",
            f"{tool.registered_at:%Y-%m-%d %H:%M} by {tool.registered_by or '?'}",
        )
    return table


def workspace_of(tool: ToolDefinition) -> str:
    """How the tool mounts its session's workspace, as its label says it (``rw:/work``)."""
    access = tool.workspace
    return f"{access.mode.value}:{access.path}" if access.mounts else "none"


def history_table(history: ToolHistory) -> Table:
    table = Table(title=f"{history.tool}: revisions")
    for column in ("rev", "change", "at", "by", "reason", "what"):
        table.add_column(column, overflow="fold")
    for revision in history.revisions:
        table.add_row(
            str(revision.rev),
            revision.change.value,
            f"{revision.at:%Y-%m-%d %H:%M:%S}",
            revision.by or "?",
            revision.reason,
            revision.detail or f"image {_short(revision.definition.image_id)}",
        )
    return table


def _short(image_id: str) -> str:
    return image_id.removeprefix("sha256:")[:12]


async def _register_via_api(
    api_url: str, token: str | None, image: str, allow: list[str], config: dict[str, str]
) -> Registration:
    async with HandsClient(api_url, token or "") as hands:
        return await hands.register_tool(image, allow=allow, config=config)


async def _register_directly(
    store_url: str | None, image: str, allow: list[str], config: dict[str, str]
) -> Registration:
    request = request_of(image, allow=allow, config=config, registered_by="bh tools")
    settings = HandsSettings.from_env(store_url=_store(store_url))
    async with AsyncExitStack() as resources:
        store = await open_store(settings.store_url)
        resources.push_async_callback(store.close)
        sandbox = await make_sandbox(settings, store, resources)
        registered = await register_request(store, sandbox, request, caps=settings.caps)
        return Registration(
            tool=registered.tool, created=registered.created, ungranted=registered.ungranted
        )


@dataclass(frozen=True)
class _Catalog:
    """Where a command reads or changes the catalog: the Hands API when its URL is set,
    else the store directly."""

    api_url: str | None
    token: str | None
    store_url: str | None

    async def ask(
        self,
        via_api: Callable[[HandsClient], Awaitable[_T]],
        direct: Callable[[SessionStore], Awaitable[_T]],
        *,
        read_only: bool = True,
    ) -> _T:
        if self.api_url:
            async with HandsClient(self.api_url, self.token or "") as hands:
                return await via_api(hands)
        store = await open_store(_store(self.store_url), read_only=read_only)
        try:
            return await direct(store)
        finally:
            await store.close()

    async def history(self, name: str, version: int | None) -> ToolHistory:
        async def direct(store: SessionStore) -> ToolHistory:
            definition = await _registered(store, name, version)
            revisions = await store.tools.history(name, definition.version)
            return ToolHistory(tool=definition.ref, revisions=revisions)

        return await self.ask(lambda hands: hands.tool_history(name, version), direct)

    async def grant(self, name: str, fields: dict[str, object]) -> ToolRevision:
        request = checked(GrantRequest, fields)
        by = request.by or ""

        async def direct(store: SessionStore) -> ToolRevision:
            revision, _ = await store.tools.grant(
                name,
                request.version,
                request.network,
                by=by,
                reason=request.reason,
                expected=request.revision,
            )
            return revision

        async def via_api(hands: HandsClient) -> ToolRevision:
            return await hands.grant_tool(
                name,
                request.version,
                allow=request.allow,
                by=by,
                reason=request.reason,
                revision=request.revision,
            )

        return await self.ask(via_api, direct, read_only=False)


async def _registered(store: SessionStore, name: str, version: int | None) -> ToolDefinition:
    definition = await store.tools.get(name, version)
    if definition is None:
        where = name if version is None else f"{name}@{version}"
        raise NotFound(f"tool {where} is not registered", tool=name)
    return definition


def _store(store_url: str | None) -> str:
    if not store_url:
        raise InvalidInput(
            "no Hands API and no store: set BH_HANDS_API_URL (--api-url) to go through the "
            "API, or BH_STORE_URL (--store) to use the store directly"
        )
    return store_url
