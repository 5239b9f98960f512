"""``bh tools``: register tool images, list and inspect registered definitions.

Through the Hands API when ``--api-url`` / ``BH_HANDS_API_URL`` is set (the image must
be on the API host's engine); otherwise directly: the store at ``--store`` /
``BH_STORE_URL`` and this machine's container engine (the sandbox ``BH_HANDS_SANDBOX``
selects, Docker by default) — so a laptop registers without running the API.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Annotated

import typer
from rich.table import Table

from bh.api_client import print_json, run
from bh.hands_client import HandsClient, Registration
from bh.ops_commands import ApiToken, ApiUrl, Json, console
from contracts import InvalidInput, NotFound
from contracts.tool import ToolDefinition
from hands.api.registration import register_request, request_of
from hands.api.views import ToolList
from hands.app import make_sandbox
from hands.settings import HandsSettings
from session_store import open_store

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
    """Register IMAGE by the labels it declares (same image again: nothing changes)."""
    settings = parse_config(config or [])
    if api_url:
        registration = run(_register_via_api(api_url, token, image, allow or [], settings))
    else:
        registration = run(_register_directly(store, image, allow or [], settings))
    if as_json:
        print_json(registration)
        return
    tool = registration.tool
    what = "registered" if registration.created else "already registered (unchanged)"
    console.print(f"{tool.ref} {what}: {tool.image} ({tool.image_id})")


@app.command(name="list")
def list_(
    store: StoreUrl = None, api_url: ApiUrl = None, token: ApiToken = None, as_json: Json = False
) -> None:
    """List registered tools, by name, then version."""
    definitions = run(_definitions(api_url, token, store))
    if as_json:
        print_json(ToolList(tools=definitions))
        return
    console.print(tools_table(definitions))


@app.command()
def inspect(
    name: Annotated[str, typer.Argument(help="The tool's name.")],
    version: Annotated[int | None, typer.Option(min=1, help="Default: the newest.")] = None,
    store: StoreUrl = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Show one definition in full (JSON)."""
    print_json(run(_definition(api_url, token, store, name, version)))


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
    for column in ("tool", "replay", "timeout", "network", "query", "image", "registered"):
        table.add_column(column, overflow="fold")
    for tool in definitions:
        table.add_row(
            tool.ref,
            tool.replay.value,
            f"{tool.timeout_s:g} s",
            ", ".join(tool.network.allow) or "none",
            "yes" if tool.queryable else "no",
            f"{tool.image} ({tool.image_id.removeprefix('sha256:')[:12]})",
            f"{tool.registered_at:%Y-%m-%d %H:%M} by {tool.registered_by or '?'}",
        )
    return table


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
        tool, created = await register_request(store, sandbox, request, caps=settings.caps)
        return Registration(tool=tool, created=created)


async def _definitions(
    api_url: str | None, token: str | None, store_url: str | None
) -> list[ToolDefinition]:
    if api_url:
        async with HandsClient(api_url, token or "") as hands:
            return await hands.tools()
    store = await open_store(_store(store_url), read_only=True)
    try:
        return await store.tools.definitions()
    finally:
        await store.close()


async def _definition(
    api_url: str | None, token: str | None, store_url: str | None, name: str, version: int | None
) -> ToolDefinition:
    if api_url:
        async with HandsClient(api_url, token or "") as hands:
            return await hands.tool(name, version)
    store = await open_store(_store(store_url), read_only=True)
    try:
        definition = await store.tools.get(name, version)
    finally:
        await store.close()
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
