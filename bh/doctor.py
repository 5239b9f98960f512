"""``bh doctor``: is a running deployment whole? One table, non-zero exit on any failure.

Against any deployment (``bh up``, compose, Kubernetes) reachable from here, it checks:

1. every endpoint's health: the APIs' and each ``--probe`` URL's ``/livez`` and
   ``/readyz`` (the failing readiness checks by name);
2. a probe session: it submits the built-in ``doctor`` task (``brain.doctor``) to a new
   session through the Session API and follows the session's event stream to the answer
   (a Brain woke, drove and committed it); with ``--tool`` the task runs that tool once;
3. with ``--tool``, the probe's operation as the Hands API reports it (succeeded);
4. the Hands API's metrics endpoint (Prometheus text with the Hands' counters).

URLs and tokens default to what ``bh up`` writes (``BH_SESSION_API_URL``/``_TOKEN``,
``BH_HANDS_API_URL``/``_TOKEN``, ``BH_PROBE_URLS``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import typer
from rich.table import Table

from bh import terminal
from bh.hands_client import HandsClient
from bh.session_client import SessionApiClient
from brain.doctor import DOCTOR
from session_api.views import PreviewView

console = terminal.console()
METRIC = "brainhands_hands_operations"


@dataclass
class Row:
    check: str
    ok: bool
    detail: str


async def examine(
    session_api: str,
    session_token: str,
    hands_api: str | None,
    hands_token: str | None,
    probes: list[str],
    *,
    tool: str | None = None,
    args: dict[str, Any] | None = None,
    within: float = 60.0,
) -> list[Row]:
    """Every check, in order; a check that raised is a failed row with the reason."""
    rows: list[Row] = []

    async def step(check: str, body: Callable[[], Awaitable[str]]) -> None:
        try:
            rows.append(Row(check, True, await body()))
        except Exception as error:  # a failed check is a row, never a traceback
            rows.append(Row(check, False, _reason(error)))

    endpoints = [("session-api", session_api)]
    endpoints += [("hands-api", hands_api)] if hands_api else []
    endpoints += [(f"probe {url}", url) for url in probes]
    async with httpx.AsyncClient(timeout=5) as http:
        for name, url in endpoints:
            await step(f"{name} /livez", functools.partial(_live, http, url))
            await step(f"{name} /readyz", functools.partial(_ready, http, url))
    operation: list[str] = []
    async with SessionApiClient(session_api, session_token) as api:
        call = {"tool": tool, "args": args or {}} if tool else {}
        await step("probe session", lambda: _probe(api, call, within, operation))
    if hands_api and hands_token:
        async with HandsClient(hands_api, hands_token) as hands:
            if tool:
                await step("probe operation", lambda: _operation(hands, operation))
            await step("hands-api /metrics", lambda: _metrics(hands))
    return rows


async def _live(http: httpx.AsyncClient, url: str) -> str:
    answer = await http.get(f"{url.rstrip('/')}/livez")
    if answer.status_code != 200:
        raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")
    build = answer.json().get("build") if answer.content else None
    return f"live, build {build}" if build else "live"


async def _ready(http: httpx.AsyncClient, url: str) -> str:
    answer = await http.get(f"{url.rstrip('/')}/readyz")
    checks = answer.json().get("checks", {}) if answer.content else {}
    failing = {name: why for name, why in checks.items() if why != "ok"}
    if answer.status_code != 200:
        raise RuntimeError(f"not ready (HTTP {answer.status_code}): {failing or answer.text[:200]}")
    return f"ready: {', '.join(checks) or 'no checks'}"


async def _probe(
    api: SessionApiClient, call: dict[str, Any], within: float, found: list[str]
) -> str:
    session_id = f"doctor-{uuid.uuid4().hex[:12]}"
    request_id = f"{session_id}-r"
    task: dict[str, Any] = {"kind": DOCTOR, "input": call}
    started = time.monotonic()
    await api.submit(session_id, {"task": task}, request_id=request_id)
    async with asyncio.timeout(within):
        async with aclosing(api.follow(session_id)) as items:
            async for item in items:
                if isinstance(item, PreviewView):
                    continue
                for submission in item.submissions:
                    if submission.request_id != request_id or not submission.status.is_final:
                        continue
                    if submission.status.value != "answered":
                        error = submission.error.message if submission.error else ""
                        raise RuntimeError(f"{session_id}: {submission.status.value} {error}")
                    answer = submission.answer if isinstance(submission.answer, dict) else {}
                    if answer.get("operation"):
                        found.append(str(answer["operation"]))
                    took = time.monotonic() - started
                    return f"{session_id} answered by {answer.get('brain', '?')} in {took:.1f} s"
    raise RuntimeError(f"{session_id}: the event stream ended before the answer")


async def _operation(hands: HandsClient, found: list[str]) -> str:
    if not found:
        raise RuntimeError("the probe session ran no operation")
    view = await hands.operation(found[0])
    if view.result is None or not view.result.succeeded:
        raise RuntimeError(f"{found[0]}: {view.status.value}, result {view.result}")
    return f"{found[0]} succeeded ({view.result.path}, {view.result.container or 'in process'})"


async def _metrics(hands: HandsClient) -> str:
    text = await hands.metrics()
    if METRIC not in text:
        raise RuntimeError(f"no {METRIC} in the exposition")
    return f"{len(text.splitlines())} lines, {METRIC} present"


def _reason(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {message}"[:300]


def doctor(
    session_api: Annotated[
        str, typer.Option(envvar="BH_SESSION_API_URL", help="the Session API's URL")
    ],
    session_token: Annotated[
        str, typer.Option(envvar="BH_SESSION_API_TOKEN", help="a Session API token (operate)")
    ],
    hands_api: Annotated[
        str | None, typer.Option(envvar="BH_HANDS_API_URL", help="the Hands API's URL")
    ] = None,
    hands_token: Annotated[
        str | None, typer.Option(envvar="BH_HANDS_API_TOKEN", help="a Hands API token (admin)")
    ] = None,
    probe: Annotated[
        list[str] | None,
        typer.Option(
            envvar="BH_PROBE_URLS", help="a worker's probe base URL (repeatable; env: spaces)"
        ),
    ] = None,
    tool: Annotated[
        str | None,
        typer.Option(help="run this tool once in the probe session (the Brains must run it)"),
    ] = None,
    args: Annotated[
        str, typer.Option(help="the tool's arguments, a JSON object", metavar="JSON")
    ] = "{}",
    within: Annotated[float, typer.Option(help="seconds for the probe session")] = 60,
) -> None:
    """Check a running deployment end to end; exit 1 when anything failed."""
    try:
        arguments = json.loads(args)
    except ValueError as error:
        raise typer.BadParameter(f"--args is not JSON: {error}") from None
    if not isinstance(arguments, dict):
        raise typer.BadParameter("--args must be a JSON object")
    rows = asyncio.run(
        examine(
            session_api,
            session_token,
            hands_api,
            hands_token,
            list(probe or []),
            tool=tool,
            args=arguments,
            within=within,
        )
    )
    table = Table("check", "", "detail", title="bh doctor")
    for row in rows:
        table.add_row(row.check, "[green]ok[/]" if row.ok else "[red]FAIL[/]", row.detail)
    console.print(table)
    failed = [row for row in rows if not row.ok]
    console.print(f"{len(rows) - len(failed)} of {len(rows)} checks passed")
    if failed:
        raise typer.Exit(1)
