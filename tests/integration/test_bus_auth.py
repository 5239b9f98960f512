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
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nats
import nats.errors
import pytest
import redis.asyncio
import redis.exceptions
from nats.aio.client import Client as NATS
from nats.js.api import StreamInfo

from bus import (
    CANCEL_SUBJECT,
    DISPATCH_STREAM,
    RESULTS_STREAM,
    Bus,
    BusSettings,
    dispatch_subject,
    result_subject,
)
from bus.backlog import HANDS_CONSUMER, SCHEDULER_CONSUMER, dispatch_backlog, results_backlog
from bus.pull import fetch_one
from contracts import StoreUnavailable
from coordination import redis_client
from runtime.credentials import endpoint, write_secret
from tests.support.eventually import assert_eventually
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


SERVICE_ROLES = ["brain", "hands", "scheduler", "api"]


async def _stream(namespace: str, name: str) -> StreamInfo:
    """The stream as the operator reads it."""
    operator = await Bus.connect(
        BusSettings(url=require("BH_NATS_URL", "NATS JetStream"), namespace=namespace)
    )
    try:
        return await operator.js.stream_info(operator.stream(name))
    finally:
        await operator.close()


@pytest.mark.parametrize("role", SERVICE_ROLES)
async def test_a_service_role_cannot_update_a_stream(namespace: str, role: str) -> None:
    """Issue 31, finding 5: as ``hands``, ``max_msgs=1`` shrank 5 queued dispatches to 1,
    and other subjects made the Brain's next dispatch publish fail. Only the operator may
    change what the bus holds."""
    operator = await Bus.connect(
        BusSettings(url=require("BH_NATS_URL", "NATS JetStream"), namespace=namespace)
    )
    for n in range(5):
        await operator.publish(dispatch_subject("echo"), b"{}", msg_id=f"queued-{n}")
    await operator.close()
    stream = f"{namespace.upper()}_DISPATCH"
    before = (await _stream(namespace, "DISPATCH")).config
    errors: list[Exception] = []
    client = await _as(role, errors)
    try:
        js = client.jetstream(timeout=0.5)  # refused: no answer comes (the error callback tells)
        shrunk = replace(before, max_msgs=1)
        moved = replace(before, subjects=[f"{namespace}.elsewhere.>"])
        tries = await asyncio.gather(
            js.update_stream(shrunk), js.update_stream(moved), return_exceptions=True
        )
        changed = [outcome for outcome in tries if not isinstance(outcome, BaseException)]
        assert changed == [], f"{role} changed the stream"
        assert all(isinstance(outcome, TimeoutError | nats.errors.Error) for outcome in tries)
        assert await _violated(errors), errors
    finally:
        await client.close()
    after = await _stream(namespace, "DISPATCH")
    assert after.state.messages == 5, f"{stream} lost queued dispatches"
    assert after.config.subjects == before.subjects


@pytest.mark.parametrize("role", SERVICE_ROLES)
async def test_a_role_meeting_a_stream_that_differs_leaves_it_and_reports_it(
    namespace: str, role: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The operator set a tighter limit on the dispatch queue and a shorter duplicate
    window on the results stream. A service starting leaves both as they are (it used to
    update them back, with a right it should not have), logs each difference, and is not
    ready while the dispatch queue may drop messages; ready again once the operator
    aligns it (``bh init``)."""
    operator = await Bus.connect(
        BusSettings(url=require("BH_NATS_URL", "NATS JetStream"), namespace=namespace)
    )
    try:
        dispatch = (await _stream(namespace, "DISPATCH")).config
        results = (await _stream(namespace, "RESULTS")).config
        await operator.js.update_stream(replace(dispatch, max_msgs=1000))
        await operator.js.update_stream(replace(results, duplicate_window=30.0))
        bus = await Bus.connect(BusSettings(url=_role_url(role), namespace=namespace))
        try:
            assert (await _stream(namespace, "DISPATCH")).config.max_msgs == 1000
            assert (await _stream(namespace, "RESULTS")).config.duplicate_window == 30.0
            drift = {name: [str(d) for d in found] for name, found in bus.drift.items()}
            assert drift == {
                f"{namespace.upper()}_DISPATCH": ["max_msgs is 1000, want unlimited"],
                f"{namespace.upper()}_RESULTS": ["duplicate_window is 30, want 120"],
            }
            assert "max_msgs is 1000, want unlimited" in caplog.text
            with pytest.raises(StoreUnavailable, match="max_msgs is 1000"):
                await bus.check()
            await operator.ensure_streams(align=True)  # what `bh init` does
            await bus.check()  # looked again: ready without a restart
            assert bus.drift == {}
        finally:
            await bus.close()
    finally:
        await operator.close()


@pytest.mark.parametrize("role", SERVICE_ROLES)
async def test_a_role_creates_the_streams_of_a_fresh_namespace(role: str) -> None:
    name = f"t{uuid.uuid4().hex[:10]}"
    bus = await Bus.connect(BusSettings(url=_role_url(role), namespace=name))
    try:
        assert bus.drift == {}
        await bus.check()
        for stream in ("DISPATCH", "RESULTS"):
            assert (await _stream(name, stream)).config.name == f"{name.upper()}_{stream}"
    finally:
        await bus.close()
        operator = await Bus.connect(
            BusSettings(url=require("BH_NATS_URL", "NATS JetStream"), namespace=name)
        )
        for stream in ("DISPATCH", "RESULTS"):
            await operator.js.delete_stream(operator.stream(stream))
        await operator.close()


@pytest.mark.parametrize(
    ("role", "stream", "consumer"),
    [
        ("hands", DISPATCH_STREAM, HANDS_CONSUMER),
        ("api", DISPATCH_STREAM, HANDS_CONSUMER),  # a Hands API run with --consume
        ("scheduler", RESULTS_STREAM, SCHEDULER_CONSUMER),
    ],
)
async def test_a_consuming_role_binds_fetches_acknowledges_and_reads_backlogs(
    namespace: str, role: str, stream: str, consumer: str
) -> None:
    """What the allow lists must leave each consuming role: every JetStream call its
    service makes, as nats-py 2.16 makes it (``Bus.connect``, the durable's bind, a
    fetch, an ack, the backlog reads of ``bus.backlog``, the readiness check)."""
    topic = dispatch_subject("echo") if stream == DISPATCH_STREAM else result_subject("s1")
    operator = await Bus.connect(
        BusSettings(url=require("BH_NATS_URL", "NATS JetStream"), namespace=namespace)
    )
    bus = await Bus.connect(BusSettings(url=_role_url(role), namespace=namespace))
    try:
        await operator.publish(topic, b"{}", msg_id="m1")
        pull = await bus.js.pull_subscribe(
            bus.subject(topic), durable=consumer, stream=bus.stream(stream)
        )
        [message] = await fetch_one(pull, wait=5)
        held = await (dispatch_backlog if stream == DISPATCH_STREAM else results_backlog)(bus)
        assert (held.ack_pending, held.oldest_age >= 0) == (1, True)  # its age: a message read
        await message.ack()
        await assert_eventually(lambda: _acknowledged(operator, stream, consumer), within=10)
        assert (await dispatch_backlog(bus)).pending == 0
        if role == "scheduler":
            assert (await results_backlog(bus)).pending == 0
        await bus.check()
    finally:
        await bus.close()
        await operator.close()


async def _acknowledged(bus: Bus, stream: str, consumer: str) -> bool:
    info = await bus.js.consumer_info(bus.stream(stream), consumer)
    return (
        info.num_ack_pending == 0 and info.ack_floor is not None and info.ack_floor.stream_seq == 1
    )


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
