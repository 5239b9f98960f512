"""``bh artifacts ls | get``: the named outputs a session's operations published (a
report, a patch, a build log), through the Session API (``docs/workspaces.md``).

Found and authenticated as ``bh show`` is; ``get`` writes to ``-o FILE`` (whole or not
at all) or stdout. Exit status 2 on an error, in the API's words.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.table import Table

from bh import terminal
from bh.api_client import print_json, run_client
from bh.session_client import SessionApiClient
from bh.session_commands import ApiToken, ApiUrl, Json, SessionArg
from bh.workspace_commands import Output, download
from contracts import InvalidInput
from contracts.model import check_id
from session_api.workspace_views import NAME_PATTERN

app = typer.Typer(
    help="List and download the artifacts of a session's operations (Session API).",
    no_args_is_help=True,
)
console = terminal.console()
errors = terminal.console(stderr=True)


def _operation_id(value: str) -> str:
    """An operation id the API can take, or the reason it cannot (before anything is
    sent: a ``/`` would reach another route)."""
    try:
        return check_id(value, "operation id")
    except InvalidInput as error:
        raise typer.BadParameter(error.message) from None


def _name(value: str) -> str:
    if not re.fullmatch(NAME_PATTERN, value):
        raise typer.BadParameter(
            f"artifact name {value[:60]!r} is not allowed: 1-128 of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return value


@app.command("ls")
def list_artifacts(
    session_id: SessionArg,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """List the artifacts of the session's operations: operation, name, size, media type."""
    found = run_client(SessionApiClient, api_url, token, lambda api: api.artifacts(session_id))
    if as_json:
        print_json(found)
        return
    if not found.artifacts:
        console.print(f"no operation of {session_id} published an artifact.", highlight=False)
        return
    table = Table(title=f"artifacts of {session_id}", title_justify="left")
    for column in ("operation", "tool", "name", "bytes", "media type", "finished"):
        table.add_column(column, overflow="fold", justify="right" if column == "bytes" else "left")
    for artifact in found.artifacts:
        table.add_row(
            artifact.operation_id,
            artifact.tool,
            artifact.name,
            f"{artifact.size:,}",
            artifact.media_type,
            f"{artifact.finished_at:%Y-%m-%d %H:%M:%S}",
        )
    console.print(table)


@app.command("get")
def get(
    session_id: SessionArg,
    operation_id: Annotated[
        str, typer.Argument(help="The operation that published it.", callback=_operation_id)
    ],
    name: Annotated[str, typer.Argument(help="The artifact's name.", callback=_name)],
    output: Output = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Download one artifact's bytes."""
    size = download(
        api_url,
        token,
        output,
        lambda api, into: api.artifact(session_id, operation_id, name, into=into),
    )
    if output is not None:
        errors.print(f"wrote {name}, {size:,} bytes, to {output}", highlight=False)
