"""Credentials named by URLs (``runtime.credentials``) and the dev stack's secrets."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bh.devstack.auth import OPERATOR, PERMISSIONS, ROLES, Secrets, nats_config, role_env
from contracts import InvalidInput
from runtime.credentials import endpoint, read_secret, redact, write_secret


def test_a_passfile_url_gives_the_user_and_the_password_off_the_url(tmp_path: Path) -> None:
    passfile = tmp_path / "brain.pass"
    write_secret(passfile, "s3cret")
    found = endpoint(f"nats://brain@127.0.0.1:4222?passfile={passfile}")
    assert (found.url, found.username, found.password) == (
        "nats://127.0.0.1:4222",
        "brain",
        "s3cret",
    )
    assert "s3cret" not in repr(found)


def test_other_query_options_stay_in_the_url(tmp_path: Path) -> None:
    passfile = tmp_path / "redis.pass"
    write_secret(passfile, "pw")
    found = endpoint(f"redis://127.0.0.1:6379/2?socket_timeout=5&passfile={passfile}")
    assert (found.url, found.username, found.password) == (
        "redis://127.0.0.1:6379/2?socket_timeout=5",
        None,
        "pw",
    )


def test_a_password_in_the_url_is_accepted_and_redacted() -> None:
    found = endpoint("redis://app:pa%40ss@host:6379/0")
    assert (found.url, found.username, found.password) == ("redis://host:6379/0", "app", "pa@ss")
    assert redact("redis://app:pa%40ss@host:6379/0") == "redis://app:***@host:6379/0"
    assert redact("nats://host:4222") == "nats://host:4222"


def test_written_secrets_are_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "x.pass"
    write_secret(path, "value")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_secret(path) == "value"


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620])
def test_a_password_file_others_can_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "open.pass"
    path.write_text("value")
    path.chmod(mode)
    with pytest.raises(InvalidInput, match=f"mode {mode:04o}"):
        read_secret(path)


def test_a_missing_password_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"nope\.pass"):
        endpoint(f"redis://h:1/0?passfile={tmp_path}/nope.pass")


def test_the_dev_secrets_are_made_once_and_kept(tmp_path: Path) -> None:
    secrets = Secrets(tmp_path / "secrets")
    secrets.ensure()
    first = secrets.passwords()
    secrets.ensure()
    assert secrets.passwords() == first
    assert set(first) == set(ROLES) and len(set(first.values())) == len(ROLES)
    assert stat.S_IMODE(secrets.root.stat().st_mode) == 0o700
    for path in secrets.root.iterdir():
        if path.name != "lock":
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert secrets.redis_conf.read_text() == f"requirepass {secrets.redis_password()}\n"


def test_the_nats_config_gives_each_role_its_permissions() -> None:
    passwords = {role: f"pw-{role}" for role in ROLES}
    text = nats_config(passwords)
    config = json.loads(text.removeprefix("authorization "))
    users = {user["user"]: user for user in config["users"]}
    assert set(users) == set(ROLES)
    assert "permissions" not in users[OPERATOR]
    brain = users["brain"]["permissions"]["publish"]
    assert "*.tools.dispatch.>" in brain["allow"] and "*.tools.results.>" not in brain["allow"]
    hands = users["hands"]["permissions"]["publish"]
    assert "*.tools.results.>" in hands["allow"] and "*.tools.dispatch.>" not in hands["allow"]
    for role in PERMISSIONS:
        assert "$JS.API.STREAM.DELETE.>" in users[role]["permissions"]["publish"]["deny"]


def test_each_system_process_gets_its_roles_nats_url_only() -> None:
    env = {
        "BH_NATS_URL": "nats://operator@h:1?passfile=/s/nats-operator.pass",
        **{f"BH_NATS_URL_{role.upper()}": f"nats://{role}@h:1" for role in PERMISSIONS},
        "OTHER": "x",
    }
    assert role_env(env, "brain-2") == {"BH_NATS_URL": "nats://brain@h:1", "OTHER": "x"}
    assert role_env(env, "hands-api")["BH_NATS_URL"] == "nats://api@h:1"
    assert role_env(env, "hands-1")["BH_NATS_URL"] == "nats://hands@h:1"
    assert role_env(env, "scheduler")["BH_NATS_URL"] == "nats://scheduler@h:1"
    assert role_env(env, "session-api") == {"OTHER": "x"}
    assert role_env(env, "email-service") == env  # not a system process: left as it is
    deployment = {"BH_NATS_URL": "nats://svc@h:1"}  # no role URLs: its own choice stands
    assert role_env(deployment, "brain-1") == deployment
