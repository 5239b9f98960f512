"""A model endpoint's request and token limits, shared by Brains through a real Redis:
a call past the minute's limit is not made; its task sleeps durably until the window
ends (its Brain lets go of the session), whichever Brain asked."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from brain.model.scripted import Script, ScriptedModel
from brain.model.settings import ModelSettings
from brain.worker import BrainSettings, build
from contracts import SubmissionStatus, TaskStatus, utcnow
from coordination import redis_client
from coordination.ratelimit import ModelLimits, endpoint_key
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.eventually import assert_eventually
from tests.support.http_server import serve
from tests.support.services import require

pytestmark = pytest.mark.redis

#: an hour's window: a test never straddles two windows (a minute's might)
HOUR = 3_600_000
SCRIPT = Script.model_validate({"model": "m", "turns": [{"content": "hi"}]})
#: an answer of 120 tokens
LONG = Script.model_validate({"model": "m", "turns": [{"content": "word " * 120}]})


async def test_the_window_counts_requests_and_tokens_on_redis_time() -> None:
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    try:
        requests = ModelLimits(client, "e1", requests_per_minute=2, prefix=prefix, window_ms=HOUR)
        assert [(await requests.admit(5)).admitted for _ in range(2)] == [True, True]
        wait = (await requests.admit(5)).wait
        assert 0 < wait <= 3600, "the third request of the window waits for the next one"
        tokens = ModelLimits(client, "e2", tokens_per_minute=10, prefix=prefix, window_ms=HOUR)
        call = await tokens.admit(4)
        assert call.admitted and call.reserved == 4
        await tokens.settle(call, 15)
        assert 0 < (await tokens.admit(1)).wait <= 3600, "the window's tokens are used up"
        other = ModelLimits(client, "e3", tokens_per_minute=10, prefix=prefix, window_ms=HOUR)
        assert (await other.admit(4)).admitted, "each endpoint has its own window"
    finally:
        await client.aclose()


async def test_calls_admitted_together_count_at_their_estimates() -> None:
    # 50 calls of about 900 tokens ask at once under 1,000 a window: admitted while
    # the window's tokens, in flight included, are under the limit.
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    try:
        limits = ModelLimits(client, "e", tokens_per_minute=1000, prefix=prefix, window_ms=HOUR)
        answers = await asyncio.gather(*(limits.admit(900) for _ in range(50)))
        admitted = [a for a in answers if a.admitted]
        assert len(admitted) == 2, "the second is the one call past the limit"
        assert (await window_tokens(client, prefix, admitted[0].window)) == 1800
        for call in admitted:
            await limits.settle(call, 300)  # they used less than reserved: room again
        assert (await limits.admit(900)).admitted
        refused = await limits.admit(900)
        assert not refused.admitted and refused.reserved == 0
    finally:
        await client.aclose()


async def test_a_call_the_server_refused_gives_its_reservation_back() -> None:
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    try:
        limits = ModelLimits(client, "e", tokens_per_minute=1000, prefix=prefix, window_ms=HOUR)
        call = await limits.admit(1200)
        assert call.admitted and not (await limits.admit(10)).admitted
        await limits.settle(call, 0)
        assert await window_tokens(client, prefix, call.window) == 0
        assert (await limits.admit(10)).admitted
    finally:
        await client.aclose()


async def test_a_call_past_the_limit_sleeps_durably_on_any_brain(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    client = SessionClient(store)
    await client.submit("a", "r1", "hello")
    await client.submit("b", "r1", "hello too")
    redis = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(SCRIPT, token="t")
    try:
        async with serve(model.app()) as model_url, AsyncExitStack() as stack:
            settings = ModelSettings(base_url=f"{model_url}/v1", api_key=SecretStr("t"), model="m")
            endpoint = endpoint_key(settings.base_url, settings.model)
            brains = [
                await build(
                    BrainSettings(store_url=url, model=settings),
                    stack,
                    limits=ModelLimits(
                        redis, endpoint, requests_per_minute=1, prefix=prefix, window_ms=HOUR
                    ),
                )
                for _ in range(2)
            ]
            first = await brains[0].runner.drive("a")
            assert not first.active
            second = await brains[1].runner.drive("b")
            assert second.active and second.next_wake_at is not None
            assert timedelta(0) < second.next_wake_at - utcnow() <= timedelta(seconds=3601)
            assert len(model.received) == 1, "the second call was not made"
            root = (await store.session("b")).state.tasks["root.r1"]
            assert root.status is TaskStatus.SLEEPING and root.sleep is not None
            assert root.sleep.next_phase == "request"
            assert (await store.session("a")).state.submissions["r1"].status is (
                SubmissionStatus.ANSWERED
            )
    finally:
        await redis.aclose()
        await store.close()


async def test_concurrent_calls_cannot_each_pass_a_token_limit_meant_for_one(
    tmp_path: Path,
) -> None:
    # Eight agents of one session ask for the model at once, under 100 tokens a window.
    # Admission counts the first call at its estimate (over 1,000 tokens) while it is in
    # flight, and at its usage (over 100) once settled: whenever the others ask, the
    # window is full.
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    client = SessionClient(store)
    for n in range(8):
        await client.submit("s1", f"r{n}", f"question {n}", conversation_id=f"c{n}")
    redis = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(LONG, token="t")
    try:
        async with serve(model.app()) as model_url, AsyncExitStack() as stack:
            settings = ModelSettings(base_url=f"{model_url}/v1", api_key=SecretStr("t"), model="m")
            limits = ModelLimits(redis, "e", tokens_per_minute=100, prefix=prefix, window_ms=HOUR)
            brain = await build(BrainSettings(store_url=url, model=settings), stack, limits=limits)
            report = await brain.runner.drive("s1")
            assert report.active and report.next_wake_at is not None
            assert len(model.received) == 1, "one call in flight fills the window by its estimate"
            state = (await store.session("s1")).state
            sleeping = [t for t in state.tasks.values() if t.status is TaskStatus.SLEEPING]
            assert len(sleeping) == 7
    finally:
        await redis.aclose()
        await store.close()


async def test_the_agent_settles_each_call_to_what_it_used(tmp_path: Path) -> None:
    # The first call is refused with a 429 (nothing billed: its reservation is given
    # back), the retry answers (its reservation becomes its usage).
    url = f"sqlite:///{tmp_path}/s.db"
    store = await open_store(url)
    await SessionClient(store).submit("s1", "r1", "hello")
    redis = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    refused_once = {"content": "hi", "fail_first": 1, "fail_status": 429, "retry_after": 0}
    model = ScriptedModel(Script.model_validate({"model": "m", "turns": [refused_once]}), token="t")
    try:
        async with serve(model.app()) as model_url, AsyncExitStack() as stack:
            settings = ModelSettings(base_url=f"{model_url}/v1", api_key=SecretStr("t"), model="m")
            limits = ModelLimits(
                redis, "e", tokens_per_minute=10_000, prefix=prefix, window_ms=HOUR
            )
            brain = await build(BrainSettings(store_url=url, model=settings), stack, limits=limits)
            assert not (await brain.runner.drive("s1")).active
        window = await redis_window(redis, HOUR)
        assert len(model.received) == 2
        usage = (await store.session("s1")).state.tasks["root.r1"].usage
        assert usage.calls == 1 and await window_tokens(redis, prefix, window) == usage.tokens
    finally:
        await redis.aclose()
        await store.close()


async def test_a_call_is_charged_to_the_window_that_admitted_it() -> None:
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    size = 200  # ms: the call below ends in a later window than the one it started in
    try:
        limits = ModelLimits(client, "e", tokens_per_minute=1000, prefix=prefix, window_ms=size)
        call = await limits.admit(10)
        assert call.admitted
        # the window's keys expire two windows on; this one must outlive the test's wait
        await client.pexpire(f"{prefix}:rate:e:tokens:{call.window}", HOUR)

        async def later_window() -> bool:
            return await redis_window(client, size) > call.window

        await assert_eventually(later_window, within=5)
        await limits.settle(call, 70)
        assert await window_tokens(client, prefix, call.window) == 70
        assert await window_tokens(client, prefix, call.window + 1) == 0
    finally:
        await client.aclose()


async def redis_window(client: Redis, size: int) -> int:
    seconds, micros = await client.time()
    return (seconds * 1000 + micros // 1000) // size


async def window_tokens(client: Redis, prefix: str, window: int) -> int:
    """The tokens a window of endpoint ``e`` holds (settled and in flight)."""
    return int(await client.get(f"{prefix}:rate:e:tokens:{window}") or 0)
