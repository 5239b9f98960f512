"""``bh ops``: look at, list, cancel, verify and settle operations through the Hands API.

The API is found by ``--api-url`` / ``BH_HANDS_API_URL`` and authenticated with
``--token`` / ``BH_HANDS_API_TOKEN`` (prefer the variable: options show in ``ps``).
Exit status 2 on an error (``code: message`` on stderr); ``verify`` exits 1 when the
tool's query did not find the operation. ``settle`` records an operator's decision on
an ``uncertain`` operation, as the token's name (``docs/hands-api.md``).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, TypeVar

import typer
from pydantic import JsonValue
from rich.table import Table

from bh import terminal
from bh.api_client import print_json, run_client
from bh.hands_client import HandsClient
from contracts import OperationStatus
from hands.api.views import DEFAULT_CANCEL_REASON, OperationSummary, OperationView

app = typer.Typer(
    help="Inspect, cancel, verify and settle operations (Hands API).", no_args_is_help=True
)
console = terminal.console()
errors = terminal.console(stderr=True)

_T = TypeVar("_T")

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api-url", envvar="BH_HANDS_API_URL", show_envvar=True, help="The Hands API's URL."
    ),
]
ApiToken = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="BH_HANDS_API_TOKEN",
        show_envvar=True,
        show_default=False,
        help="The Hands API token (prefer the variable).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
OperationId = Annotated[str, typer.Argument(help="The operation's id.")]


@app.command()
def get(
    operation_id: OperationId, api_url: ApiUrl = None, token: ApiToken = None, as_json: Json = False
) -> None:
    """Show an operation's record and, once written, its result and log tail."""
    view = run_client(HandsClient, api_url, token, lambda hands: hands.operation(operation_id))
    if as_json:
        print_json(view)
        return
    show_operation(view)


@app.command(name="list")
def list_(
    session: Annotated[
        str | None,
        typer.Option(help="The session (default: scan up to 100 active sessions)."),
    ] = None,
    status: Annotated[OperationStatus | None, typer.Option(help="Only this status.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many.")] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """List operations, oldest first."""
    found = run_client(
        HandsClient,
        api_url,
        token,
        lambda hands: hands.operations(session=session, status=status, limit=limit),
    )
    if as_json:
        print_json(found)
        return
    console.print(operations_table(found.operations))
    if found.truncated:
        errors.print("[yellow]more operations match[/]: narrow with --session/--status/--limit")


@app.command()
def cancel(
    operation_id: OperationId,
    reason: Annotated[str, typer.Option(help="Why (recorded with the operation).")] = (
        DEFAULT_CANCEL_REASON
    ),
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Cancel an operation that has no result yet (one that has keeps it)."""
    view = run_client(HandsClient, api_url, token, lambda hands: hands.cancel(operation_id, reason))
    if as_json:
        print_json(view)
        return
    show_operation(view)
    if view.result is None:
        console.print("cancellation sent; the Hands whose host runs it records the result")


@app.command()
def verify(
    operation_id: OperationId, api_url: ApiUrl = None, token: ApiToken = None, as_json: Json = False
) -> None:
    """Ask the tool's query entry point whether the operation happened."""
    verification = run_client(HandsClient, api_url, token, lambda hands: hands.verify(operation_id))
    if as_json:
        print_json(verification)
    else:
        show_operation(verification.operation)
        said = "found: its outcome is the result" if verification.found else "not found"
        console.print(f"query: [bold]{said}[/]")
    if not verification.found:
        raise typer.Exit(1)


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@app.command()
def settle(
    operation_id: OperationId,
    outcome: Annotated[Outcome, typer.Option(help="What happened, as you found out.")],
    reason: Annotated[str, typer.Option(help="Why you say so (recorded, with your token's name).")],
    output: Annotated[
        str | None, typer.Option(help="The operation's output, as JSON (for succeeded).")
    ] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Decide an uncertain operation's outcome; its waiting task then resumes with it."""
    value = _json_option(output, "--output")
    view = run_client(
        HandsClient,
        api_url,
        token,
        lambda hands: hands.settle(
            operation_id, outcome=outcome.value, reason=reason, output=value
        ),
    )
    if as_json:
        print_json(view)
        return
    show_operation(view)
    console.print(f"settled [bold]{view.status.value}[/] by {view.decided_by}: {view.decision}")


def _json_option(text: str | None, option: str) -> JsonValue:
    if text is None:
        return None
    try:
        value: JsonValue = json.loads(text)
    except json.JSONDecodeError as error:
        errors.print(f"[red]invalid_input[/]: {option} is not JSON: {error}", highlight=False)
        raise typer.Exit(2) from None
    return value


def show_operation(view: OperationView) -> None:
    table = Table("field", "value", show_header=False, title=f"operation {view.operation_id}")
    for key, value in view.model_dump(exclude={"result"}).items():
        table.add_row(key, _cell(value))
    result = view.result
    if result is not None:
        for key, value in result.model_dump(exclude={"log_tail"}).items():
            table.add_row(f"result.{key}", _cell(value))
    console.print(table)
    if result is not None and result.log_tail:
        console.rule("log tail")
        console.print(result.log_tail, markup=False, highlight=False)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def operations_table(operations: list[OperationSummary]) -> Table:
    table = Table(title="operations")
    for column in ("operation", "session", "tool", "status", "attempts", "executor", "reason"):
        table.add_column(column, overflow="fold")
    for op in operations:
        tool = op.tool if op.tool_version is None else f"{op.tool}@{op.tool_version}"
        decided = f" — decided by {op.decided_by}: {op.decision}" if op.decided_by else ""
        table.add_row(
            op.operation_id,
            op.session_id,
            tool,
            op.status.value,
            str(op.attempts),
            op.executor or "",
            (op.reason or "") + decided,
        )
    return table
