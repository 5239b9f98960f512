"""No anonymous access to the buses (invariant 16): the dev stack's NATS and Redis refuse a
client without credentials, each NATS role may publish only its own messages, and the
credentials live in 0600 files that ``bh dev env`` and the services' logs never show.

The URLs come from ``bh dev env`` (scripts/test evals it): ``BH_NATS_URL`` is the
operator's, ``BH_NATS_URL_<ROLE>`` each service role's, all naming a password *file*.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nats
import nats.errors
import pytest
import redis.asyncio
import redis.exceptions
from nats.aio.client import Client as NATS

from bus import CANCEL_SUBJECT, Bus, BusSettings, dispatch_subject, result_subject
from contracts import StoreUnavailable
from coordination import redis_client
from runtime.credentials import endpoint, write_secret
from tests.support.services import in_ci, require

pytestmark = [pytest.mark.nats, pytest.mark.redis]


def _role_url(role: str) -> str:
    require("BH_NATS_URL", "NATS JetStream")
    url = os.environ.get(f"BH_NATS_URL_{role.upper()}")
    if not url:
        message = f'BH_NATS_URL_{role.upper()} is not set: run `eval "$(bh dev env)"`'
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return url


def _passfile(url: str) -> Path:
    files = parse_qs(urlsplit(url).query).get("passfile")
    assert files, f"{url} names no password file"
    return Path(files[0])


def _passfiles() -> list[Path]:
    urls = [require("BH_REDIS_URL", "Redis"), require("BH_NATS_URL", "NATS JetStream")]
    urls += [_role_url(role) for role in ("brain", "hands", "scheduler", "api")]
    return [_passfile(url) for url in urls]


async def _quiet(error: Exception) -> None:
    """nats-py reports every refused connect and violation here; the tests assert them."""


async def _refused(url: str) -> None:
    client = NATS()
    try:
        with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
            await client.connect(url, connect_timeout=2, allow_reconnect=False, error_cb=_quiet)
    finally:
        await client.close()


async def test_a_nats_client_without_credentials_is_refused() -> None:
    await _refused(endpoint(require("BH_NATS_URL", "NATS JetStream")).url)


async def test_a_nats_client_with_a_wrong_password_is_refused() -> None:
    parts = urlsplit(endpoint(require("BH_NATS_URL", "NATS JetStream")).url)
    await _refused(f"nats://operator:wrong@{parts.netloc}")


async def test_a_redis_client_without_the_password_is_refused() -> None:
    bare = endpoint(require("BH_REDIS_URL", "Redis")).url
    client = redis.asyncio.Redis.from_url(bare, socket_connect_timeout=2)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            await client.ping()
    finally:
        await client.aclose()


async def test_a_redis_client_from_the_factory_gets_in() -> None:
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"), socket_connect_timeout=2)
    try:
        assert await client.ping() is True
    finally:
        await client.aclose()


@pytest.fixture
async def namespace() -> AsyncIterator[str]:
    """A test namespace whose streams the operator made (and removes after)."""
    name = f"t{uuid.uuid4().hex[:10]}"
    operator = await Bus.connect(
        BusSettings(url=require("BH_NATS_URL", "NATS JetStream"), namespace=name)
    )
    yield name
    for stream in ("DISPATCH", "RESULTS"):
        await operator.js.delete_stream(operator.stream(stream))
    await operator.close()


async def _as(role: str, errors: list[Exception]) -> NATS:
    found = endpoint(_role_url(role))

    async def collect(error: Exception) -> None:
        errors.append(error)

    return await nats.connect(
        found.url,
        user=found.username,
        password=found.password,
        connect_timeout=2,
        allow_reconnect=False,
        error_cb=collect,
    )


async def _publishes(role: str, subject: str) -> tuple[bool, list[Exception]]:
    """Whether ``role`` can publish on ``subject`` (a JetStream publish is acked)."""
    errors: list[Exception] = []
    client = await _as(role, errors)
    try:
        await client.jetstream().publish(subject, b"{}", timeout=2)
    except (TimeoutError, nats.errors.Error):
        await _violated(errors, within=5)
        return False, errors
    finally:
        await client.close()
    return True, errors


async def test_each_role_publishes_its_own_messages(namespace: str) -> None:
    dispatch = f"{namespace}.{dispatch_subject('echo')}"
    result = f"{namespace}.{result_subject('s1')}"
    assert (await _publishes("brain", dispatch))[0]
    assert (await _publishes("scheduler", dispatch))[0]
    assert (await _publishes("hands", result))[0]
    assert (await _publishes("api", result))[0]


@pytest.mark.parametrize(
    ("role", "topic"),
    [
        ("hands", dispatch_subject("echo")),
        ("api", dispatch_subject("echo")),
        ("brain", result_subject("s1")),
        ("scheduler", result_subject("s1")),
    ],
)
async def test_a_role_cannot_publish_another_roles_messages(
    namespace: str, role: str, topic: str
) -> None:
    published, errors = await _publishes(role, f"{namespace}.{topic}")
    assert not published
    assert any("permissions violation" in str(error).lower() for error in errors), errors


async def test_only_the_hands_hear_cancellations(namespace: str) -> None:
    errors: list[Exception] = []
    client = await _as("brain", errors)
    try:
        await client.subscribe(f"{namespace}.{CANCEL_SUBJECT}")
        await client.flush(timeout=2)
        assert await _violated(errors), errors
    finally:
        await client.close()


async def test_a_service_role_cannot_delete_a_stream(namespace: str) -> None:
    errors: list[Exception] = []
    client = await _as("hands", errors)
    try:
        with pytest.raises((TimeoutError, nats.errors.Error)):
            await client.jetstream(timeout=2).delete_stream(f"{namespace.upper()}_DISPATCH")
    finally:
        await client.close()


def test_the_credential_files_are_private() -> None:
    for path in _passfiles():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700, path.parent


def test_bh_dev_env_and_the_service_logs_hold_no_secret() -> None:
    passfiles = _passfiles()
    secrets = {path.read_text().strip() for path in passfiles}
    shown = subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", "env"],
        capture_output=True,
        text=True,
        check=True,
    )
    home = passfiles[0].parent.parent  # <dev home>/secrets/<file>
    logs = [path.read_text(errors="replace") for path in home.glob("**/logs/*.log")]
    assert logs, f"no logs under {home}"
    for text in (shown.stdout, shown.stderr, *logs):
        assert not [secret for secret in secrets if secret in text]


async def test_a_service_with_a_wrong_password_stops_at_once_with_a_clear_error(
    tmp_path: Path,
) -> None:
    """nats-py would retry a refused first login forever; the service must not hang."""
    wrong = tmp_path / "wrong.pass"
    write_secret(wrong, "not-the-password")
    parts = urlsplit(endpoint(_role_url("brain")).url)
    url = f"nats://brain@{parts.netloc}?passfile={wrong}"
    with pytest.raises(StoreUnavailable, match="Authorization Violation") as refused:
        await asyncio.wait_for(Bus.connect(BusSettings(url=url, namespace="tauth")), 20)
    assert "not-the-password" not in str(refused.value)


async def _violations_broadcasting(role: str, subject: str) -> list[Exception]:
    """The permission errors a plain publish on ``subject`` as ``role`` brings back."""
    errors: list[Exception] = []
    client = await _as(role, errors)
    try:
        await client.publish(subject, b"{}")
        await client.flush(timeout=2)
        await _violated(errors, within=2)  # none may come: then the wait is the bound
    finally:
        await client.close()
    return [error for error in errors if "permissions violation" in str(error).lower()]


@pytest.mark.parametrize(("role", "allowed"), [("brain", True), ("api", True), ("hands", False)])
async def test_cancellations_come_from_the_brain_and_the_hands_api(
    namespace: str, role: str, allowed: bool
) -> None:
    violations = await _violations_broadcasting(role, f"{namespace}.{CANCEL_SUBJECT}")
    assert (not violations) is allowed, violations


async def _violated(errors: list[Exception], *, within: float = 10) -> bool:
    """Whether the server's permissions violation reached the error callback within
    ``within`` s: nats-py runs the callback as a task of its own, so it may come after
    the flush that followed the refused operation (a clean-clone CI run saw it late)."""
    deadline = asyncio.get_running_loop().time() + within
    while not any("permissions violation" in str(error).lower() for error in errors):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
