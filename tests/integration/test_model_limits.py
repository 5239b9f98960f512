"""A model endpoint's request and token limits, shared by Brains through a real Redis:
a call past the minute's limit is not made; its task sleeps durably until the window
ends (its Brain lets go of the session), whichever Brain asked."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from brain.model.scripted import Script, ScriptedModel
from brain.model.settings import ModelSettings
from brain.worker import BrainSettings, build
from contracts import SubmissionStatus, TaskStatus, utcnow
from coordination import redis_client
from coordination.ratelimit import ModelLimits, endpoint_key
from session_store import open_store
from session_store.submissions import SessionClient
from tests.support.http_server import serve
from tests.support.services import require

pytestmark = pytest.mark.redis

#: an hour's window: a test never straddles two windows (a minute's might)
HOUR = 3_600_000
SCRIPT = Script.model_validate({"model": "m", "turns": [{"content": "hi"}]})


async def test_the_window_counts_requests_and_tokens_on_redis_time() -> None:
    client = redis_client.connect(require("BH_REDIS_URL", "Redis"))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    try:
        requests = ModelLimits(client, "e1", requests_per_minute=2, prefix=prefix, window_ms=HOUR)
        assert [await requests.admit() for _ in range(2)] == [0, 0]
        wait = await requests.admit()
        assert 0 < wait <= 3600, "the third request of the window waits for the next one"
        tokens = ModelLimits(client, "e2", tokens_per_minute=10, prefix=prefix, window_ms=HOUR)
        assert await tokens.admit() == 0
        await tokens.charge(15)
        assert 0 < await tokens.admit() <= 3600, "the window's tokens are used up"
        other = ModelLimits(client, "e3", tokens_per_minute=10, prefix=prefix, window_ms=HOUR)
        assert await other.admit() == 0, "each endpoint has its own window"
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
