"""Credentials named by URLs (``runtime.credentials``) and the dev stack's secrets."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bh.devstack.auth import (
    HANDS_CONSUMER,
    OPERATOR,
    PERMISSIONS,
    ROLES,
    SCHEDULER_CONSUMER,
    Secrets,
    nats_config,
    role_env,
)
from bus import backlog
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


def test_ensuring_the_dev_secrets_says_whether_the_nats_config_changed(tmp_path: Path) -> None:
    """``bh dev up`` reloads a running nats-server when this says so."""
    secrets = Secrets(tmp_path / "secrets")
    assert secrets.ensure() is True  # made
    assert secrets.ensure() is False  # as it was
    older = secrets.nats_conf.read_text().replace("$JS.API.STREAM.CREATE.*", "$JS.API.>")
    write_secret(secrets.nats_conf, older)  # an older version's permissions
    assert secrets.ensure() is True
    assert "$JS.API.>" not in secrets.nats_conf.read_text()


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
        allowed = users[role]["permissions"]["publish"]["allow"]
        assert "$JS.API.STREAM.CREATE.*" in allowed and "$JS.API.INFO" in allowed


def _allows(pattern: str, subject: str) -> bool:
    """Whether a NATS subject pattern (``*`` one token, ``>`` the rest) covers ``subject``."""
    wanted, given = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(given) > index
        if index >= len(given) or token not in ("*", given[index]):
            return False
    return len(wanted) == len(given)


def _may_publish(role: str, subject: str) -> bool:
    return any(_allows(pattern, subject) for pattern in PERMISSIONS[role][0])


#: what only the operator may do to what the bus holds (issue 31, 5: as ``hands``,
#: ``STREAM.UPDATE`` shrank the dispatch queue to one message)
DESTRUCTIVE = [
    "$JS.API.STREAM.UPDATE.BH_DISPATCH",
    "$JS.API.STREAM.DELETE.BH_DISPATCH",
    "$JS.API.STREAM.PURGE.BH_RESULTS",
    "$JS.API.STREAM.MSG.DELETE.BH_DISPATCH",
    "$JS.API.CONSUMER.DELETE.BH_DISPATCH.hands",
    "$JS.API.STREAM.SNAPSHOT.BH_DISPATCH",
    "$JS.API.STREAM.RESTORE.BH_DISPATCH",
    "$JS.API.CONSUMER.PAUSE.BH_DISPATCH.hands",
    "$JS.API.STREAM.PEER.REMOVE.BH_DISPATCH",
    "$JS.API.META.LEADER.STEPDOWN",
]


@pytest.mark.parametrize("role", sorted(PERMISSIONS))
def test_no_service_role_may_change_or_destroy_what_the_bus_holds(role: str) -> None:
    assert [subject for subject in DESTRUCTIVE if _may_publish(role, subject)] == []


@pytest.mark.parametrize(
    ("role", "consumer", "allowed"),
    [
        ("hands", HANDS_CONSUMER, True),
        ("hands", SCHEDULER_CONSUMER, False),
        ("scheduler", SCHEDULER_CONSUMER, True),
        ("scheduler", HANDS_CONSUMER, False),
        ("api", HANDS_CONSUMER, True),  # --consume: the Hands API runs dispatches too
        ("brain", HANDS_CONSUMER, False),
        ("brain", SCHEDULER_CONSUMER, False),
    ],
)
def test_a_role_takes_only_from_its_own_consumer(role: str, consumer: str, allowed: bool) -> None:
    """What nats-py 2.16 publishes to bind, fetch from and acknowledge a durable."""
    stream = "BH_DISPATCH" if consumer == HANDS_CONSUMER else "BH_RESULTS"
    subjects = [
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
        f"$JS.ACK.{stream}.{consumer}.1.7.7.1796576905534695735.0",
        f"$JS.ACK.hub.ACCHASH.{stream}.{consumer}.1.7.7.1796576905534695735.0.tok",
    ]
    assert [_may_publish(role, subject) for subject in subjects] == [allowed] * len(subjects)


def test_the_roles_consumer_names_are_the_bus_s() -> None:
    assert (HANDS_CONSUMER, SCHEDULER_CONSUMER) == (
        backlog.HANDS_CONSUMER,
        backlog.SCHEDULER_CONSUMER,
    )


@pytest.mark.parametrize("role", ["hands", "scheduler", "api"])
def test_the_roles_reading_backlogs_may_read_the_hands_consumer_and_a_message(role: str) -> None:
    assert _may_publish(role, "$JS.API.CONSUMER.INFO.BH_DISPATCH.hands")
    assert _may_publish(role, "$JS.API.STREAM.MSG.GET.BH_DISPATCH")


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
