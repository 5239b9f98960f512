"""``bh workspace ls | get | diff | versions | retention``: a session's workspace as of
any commit, through the Session API (``docs/workspaces.md``, "Reading a workspace"),
and how many of its versions it keeps ("Retention").

The API and its token are found as for ``bh show`` (``--api-url`` /
``BH_SESSION_API_URL``, ``--token`` / ``BH_SESSION_API_TOKEN``). Bytes go to ``-o FILE``
(written beside it and renamed into place once whole: a broken download leaves no
partial file) or to stdout. Exit status 2 on an error, in the API's words.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, BinaryIO, Final, TypeVar

import typer
from rich.table import Table
from rich.text import Text

from bh import terminal
from bh.api_client import print_json, run_client
from bh.session_client import SessionApiClient
from bh.session_commands import ApiToken, ApiUrl, Json, SessionArg
from contracts.workspace import EntryKind, ManifestEntry, WorkspaceRetention
from session_api.workspace_views import Change, DiffView, PathView, VersionList

app = typer.Typer(
    help="Read a session's workspace as of any commit (Session API).", no_args_is_help=True
)
console = terminal.console()
errors = terminal.console(stderr=True)

_T = TypeVar("_T")
_DIGEST: Final = 12

At = Annotated[
    int | None,
    typer.Option("--at", min=1, help="As it was right after this commit (default: now)."),
]
Output = Annotated[
    Path | None,
    typer.Option("-o", "--output", dir_okay=False, help="Write the bytes here (default: stdout)."),
]


@app.command("ls")
def list_files(
    session_id: SessionArg,
    at: At = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """List the workspace's files: its version and every path with its kind, mode and size."""
    found = run_client(
        SessionApiClient, api_url, token, lambda api: api.workspace(session_id, at=at)
    )
    if as_json:
        print_json(found)
        return
    version = found.version
    base = f", base {version.base[:_DIGEST]}" if version.base else ", from the empty workspace"
    console.print(
        f"workspace of {found.session_id} as of commit {found.seq}: version "
        f"{version.id[:_DIGEST]}{base} · {version.files} files, {version.size:,} bytes",
        highlight=False,
    )
    console.print(entries_table(found.entries))


@app.command("get")
def get(
    session_id: SessionArg,
    path: Annotated[
        str | None, typer.Argument(help="A path in the workspace (a file, directory or link).")
    ] = None,
    tar: Annotated[
        bool, typer.Option("--tar", help="The whole tree as a tarball instead of one path.")
    ] = False,
    at: At = None,
    output: Output = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Get a file's bytes, a directory's listing or a link's target — or, with --tar,
    the whole tree as a tarball (links as links, modes kept)."""
    if tar == (path is not None):
        raise typer.BadParameter("give a PATH or --tar, one of them")
    if tar and output is None and sys.stdout.isatty():
        raise typer.BadParameter("a tarball is binary: give -o FILE or redirect stdout")

    def fetch(api: SessionApiClient, into: BinaryIO) -> Awaitable[PathView]:
        if path is None:
            return api.workspace_tar(session_id, into=into, at=at)
        return api.workspace_path(session_id, path, into=into, at=at)

    got = download(
        api_url, token, output, fetch, wrote=lambda got: got.kind is EntryKind.FILE or tar
    )
    if output is not None and got.kind is not EntryKind.FILE and not tar:
        errors.print(f"{got.path} is a {got.kind.value}: nothing written to {output}")
    if got.kind is EntryKind.LINK:
        console.print(f"{got.path} -> {got.target} (a link; not followed)", highlight=False)
    elif got.kind is EntryKind.DIR and not tar:
        console.print(f"{got.path}/ as of commit {got.seq}:", highlight=False)
        console.print(entries_table(got.entries))
    elif output is not None:
        what = "tarball" if tar else f"{got.path} ({got.mode or 0:04o})"
        errors.print(
            f"wrote {what}, {got.size:,} bytes, of version {got.version[:_DIGEST]} "
            f"as of commit {got.seq} to {output}",
            highlight=False,
        )


@app.command()
def diff(
    session_id: SessionArg,
    since: Annotated[
        int,
        typer.Option("--from", min=0, help="From the workspace after this commit (0: empty)."),
    ],
    to: Annotated[
        int | None, typer.Option(min=1, help="To the workspace after this commit (default: now).")
    ] = None,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """Show what changed between two commits' workspaces: each added, removed or changed
    path, with a unified diff for text files."""
    found = run_client(
        SessionApiClient,
        api_url,
        token,
        lambda api: api.workspace_diff(session_id, since=since, to=to),
    )
    if as_json:
        print_json(found)
        return
    for line in diff_lines(found):
        console.print(line, highlight=False, soft_wrap=True)


@app.command()
def versions(
    session_id: SessionArg,
    with_diff: Annotated[
        bool, typer.Option("--diff", help="Also show what each version changed.")
    ] = False,
    api_url: ApiUrl = None,
    token: ApiToken = None,
    as_json: Json = False,
) -> None:
    """List the versions the session applied: the commit that made each the head, the
    operation whose result produced it, its size (with ``--diff``, each one's change)."""

    async def read(api: SessionApiClient) -> tuple[VersionList, list[DiffView]]:
        found = await api.workspace_versions(session_id)
        changes: list[DiffView] = []
        if with_diff:
            seqs = [applied.seq for applied in found.versions]
            for before, seq in zip([0, *seqs], seqs, strict=False):
                changes.append(await api.workspace_diff(session_id, since=before, to=seq))
        return found, changes

    found, changes = run_client(SessionApiClient, api_url, token, read)
    if as_json:
        if with_diff:  # one document: the versions and, in their order, their changes
            document = found.model_dump(mode="json")
            document["diffs"] = [change.model_dump(mode="json") for change in changes]
            typer.echo(json.dumps(document, indent=2))
        else:
            print_json(found)
        return
    if not found.versions:
        console.print(f"{session_id} applied no write to its workspace yet.", highlight=False)
        return
    table = Table(title=f"workspace versions of {session_id}", title_justify="left")
    for column in ("commit", "version", "base", "operation", "files", "bytes", "committed"):
        table.add_column(column, overflow="fold")
    for applied in found.versions:
        version = applied.version
        made_by = applied.operation_id or (
            f"(forked from {applied.inherited_from})" if applied.inherited_from else ""
        )
        table.add_row(
            str(applied.seq),
            version.id[:_DIGEST],
            (version.base or "(empty)")[:_DIGEST],
            made_by,
            str(version.files),
            f"{version.size:,}",
            f"{applied.committed_at:%Y-%m-%d %H:%M:%S}" if applied.committed_at else "",
        )
    console.print(table)
    for applied, change in zip(found.versions, changes, strict=True):
        console.rule(f"commit {applied.seq}: {applied.operation_id or 'forked'}", align="left")
        for line in diff_lines(change) or [Text("(no change)")]:
            console.print(line, highlight=False, soft_wrap=True)


@app.command()
def retention(
    session_id: SessionArg,
    keep: Annotated[
        int | None,
        typer.Option(
            "--keep",
            min=1,
            max=100_000,
            help="Keep this many of its latest versions from collection.",
        ),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Back to the default (keep the latest 10).")
    ] = False,
    api_url: ApiUrl = None,
    token: ApiToken = None,
) -> None:
    """Set how many of its latest workspace versions a session keeps from collection;
    its head and the versions its open calls use are kept whatever this says."""
    if (keep is None) != clear:
        raise typer.BadParameter("give --keep N or --clear, one of them")
    chosen = None if keep is None else WorkspaceRetention(keep_versions=keep)
    run_client(SessionApiClient, api_url, token, lambda api: api.set_retention(session_id, chosen))
    said = chosen or WorkspaceRetention()
    default = " (the default)" if chosen is None else ""
    console.print(
        f"{session_id}: keeps its latest {said.keep_versions} versions{default}", highlight=False
    )


def entries_table(entries: list[ManifestEntry]) -> Table:
    table = Table(show_edge=False, box=None, pad_edge=False)
    for column in ("mode", "kind", "bytes", "path"):
        table.add_column(column, overflow="fold", justify="right" if column == "bytes" else "left")
    for entry in entries:
        mode = "" if entry.kind is EntryKind.LINK else f"{entry.mode:04o}"
        shown = Text(entry.path + ("/" if entry.kind is EntryKind.DIR else ""))
        if entry.kind is EntryKind.LINK:
            shown.append(f" -> {entry.target}", style="cyan")
        size = f"{entry.size:,}" if entry.kind is EntryKind.FILE else ""
        table.add_row(mode, entry.kind.value, size, shown)
    if not entries:
        table.add_row("", "", "", Text("(empty)", style="dim"))
    return table


_MARK: Final = {
    Change.ADDED: ("A", "green"),
    Change.REMOVED: ("D", "red"),
    Change.CHANGED: ("M", "yellow"),
}


def diff_lines(found: DiffView) -> list[Text]:
    """The changes, a line each, then each text diff coloured as git colours it."""
    before = (found.from_version or "(empty)")[:_DIGEST]
    after = (found.to_version or "(empty)")[:_DIGEST]
    lines = [
        Text(
            f"{found.session_id}: commit {found.from_seq} ({before}) → commit {found.to_seq} "
            f"({after}): {len(found.changes)} paths changed",
            style="bold",
        )
    ]
    for change in found.changes:
        mark, style = _MARK[change.change]
        line = Text(f"{mark} {change.path}", style=style)
        if change.note:
            line.append(f"  ({change.note})", style="dim")
        lines.append(line)
    for change in found.changes:
        lines.extend(_coloured(change.diff or ""))
    return lines


def _coloured(diff: str) -> list[Text]:
    styles = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))
    coloured = []
    for line in diff.splitlines():
        style = next((style for prefix, style in styles if line.startswith(prefix)), "")
        coloured.append(Text(line, style=style))
    return coloured


def download(
    api_url: str | None,
    token: str | None,
    output: Path | None,
    fetch: Callable[[SessionApiClient, BinaryIO], Awaitable[_T]],
    *,
    wrote: Callable[[_T], bool] = lambda got: True,
) -> _T:
    """Run ``fetch`` writing to ``output`` or to stdout. ``output`` is written whole
    or not at all (the bytes go beside it, renamed into place once they all came and
    ``wrote`` says they are what was asked for)."""
    if output is None:
        stdout = sys.stdout.buffer
        try:
            return run_client(SessionApiClient, api_url, token, lambda api: fetch(api, stdout))
        finally:
            stdout.flush()
    partial = output.with_name(f".{output.name}.part")
    try:
        with partial.open("wb") as into:
            got = run_client(SessionApiClient, api_url, token, lambda api: fetch(api, into))
        if wrote(got):
            partial.replace(output)
        return got
    finally:
        partial.unlink(missing_ok=True)
