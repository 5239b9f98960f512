"""``bh workspace`` and ``bh artifacts``: their help pages, and the arguments refused
before anything is sent (no Session API is reached: none runs at the URL given)."""

from __future__ import annotations

from typer.testing import CliRunner

from bh.cli import app

# Nothing listens here: a command that got past its checks would fail to connect.
ENV = {"COLUMNS": "120", "NO_COLOR": "1", "BH_SESSION_API_URL": "http://127.0.0.1:9"}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=ENV)
    return result.exit_code, result.output


def test_the_groups_list_their_commands() -> None:
    code, page = _run("workspace", "--help")
    assert code == 0, page
    for command in ("ls", "get", "diff", "versions"):
        assert f"│ {command} " in page, (command, page)
    code, page = _run("artifacts", "--help")
    assert code == 0 and "│ ls " in page and "│ get " in page, page


def test_each_command_says_its_options() -> None:
    assert "--at" in _run("workspace", "ls", "--help")[1]
    page = _run("workspace", "get", "--help")[1]
    assert "--tar" in page and "--output" in page and "--at" in page, page
    page = _run("workspace", "diff", "--help")[1]
    assert "--from" in page and "--to" in page, page
    assert "--output" in _run("artifacts", "get", "--help")[1]


def test_get_wants_a_path_or_the_tarball_not_both() -> None:
    code, page = _run("workspace", "get", "s1")
    assert code == 2 and "give a PATH or --tar" in page, page
    code, page = _run("workspace", "get", "s1", "a.txt", "--tar", "-o", "x.tar")
    assert code == 2 and "give a PATH or --tar" in page, page


def test_a_bad_commit_operation_or_name_is_refused_before_it_is_sent() -> None:
    code, page = _run("workspace", "ls", "s1", "--at", "0")
    assert code == 2 and "--at" in page, page
    code, page = _run("artifacts", "get", "s1", "op/../x", "report.txt")
    assert code == 2 and "operation id" in page, page
    code, page = _run("artifacts", "get", "s1", "op-1", "../report")
    assert code == 2 and "artifact name" in page, page
