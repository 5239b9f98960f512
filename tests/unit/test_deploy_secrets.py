"""``python -m bh.deploy_secrets DIR`` run twice at once (two operators, or an install
script and a retry): every file is made by one of them, and the files that derive from
others (``nats.conf`` from the NATS passwords, ``redis.conf`` from Redis's,
``store.credentials`` from the S3 keys) agree with them — an exists-then-write without a
lock let the runs replace each other's passwords under a config already written."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import pytest

from bh.deploy_secrets import admin_token, ensure, main
from bh.devstack.auth import ROLES

RUNS = 6
ROUNDS = 15


def _consistent(directory: Path) -> list[str]:
    """The derived files that disagree with what they derive from."""
    read = {path.name: path.read_text().strip() for path in directory.iterdir()}
    wrong = []
    if read["redis.conf"] != f"requirepass {read['redis.pass']}":
        wrong.append("redis.conf")
    users = json.loads(read["nats.conf"].split("authorization ", 1)[1])["users"]
    if {user["user"]: user["password"] for user in users} != {
        role: read[f"nats-{role}.pass"] for role in ROLES
    }:
        wrong.append("nats.conf")
    route = read["nats-route.pass"]
    if f'"password": "{route}"' not in read["nats.conf"]:
        wrong.append("nats.conf (routes)")
    keys = (read["s3-access-key"], read["s3-secret-key"])
    if not all(key in read["store.credentials"] for key in keys):
        wrong.append("store.credentials")
    return wrong


def test_runs_at_once_make_one_consistent_set_of_files(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        directory = tmp_path / f"secrets-{round_}"
        start = threading.Barrier(RUNS)
        made: list[list[str]] = []

        def run(directory: Path, start: threading.Barrier, made: list[list[str]]) -> None:
            start.wait()
            made.append(ensure(directory))

        runs = [threading.Thread(target=run, args=(directory, start, made)) for _ in range(RUNS)]
        for thread in runs:
            thread.start()
        for thread in runs:
            thread.join()
        assert _consistent(directory) == [], round_
        every = [name for names in made for name in names]
        assert len(every) == len(set(every)), f"round {round_}: a file made twice: {every}"
        for path in directory.iterdir():  # the lock too: nothing others may read
            assert not path.stat().st_mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP), path


def test_token_prints_an_apis_admin_token_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ensure(tmp_path / "secrets")
    assert main([str(tmp_path / "secrets"), "--token", "session-api"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == admin_token(tmp_path / "secrets", "session-api")
    assert printed in (tmp_path / "secrets" / "session-api.tokens").read_text()
    assert main([str(tmp_path / "secrets"), "--token", "redis"]) == 2  # not an API
    assert main([str(tmp_path / "nowhere"), "--token", "hands-api"]) == 2
    assert "no admin token of hands-api" in capsys.readouterr().err
