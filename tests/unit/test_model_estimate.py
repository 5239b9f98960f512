"""What a model call is held at before it is made (``brain.model.estimate``)."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from brain.model.estimate import CHARS_PER_TOKEN, estimate
from brain.model.messages import ChatMessage, ToolSchema
from brain.model.openai import OpenAIChatClient
from brain.model.settings import ModelSettings
from contracts import Prices

MESSAGES = [
    ChatMessage(role="system", content="be brief"),
    ChatMessage(role="user", content="word " * 300),
]
TOOLS = [ToolSchema(name="echo", parameters={"type": "object"})]


def test_the_prompt_errs_high_and_the_answer_is_counted_at_its_most() -> None:
    held = estimate(MESSAGES, TOOLS, output_tokens=64, prices=Prices(input=2.0, output=8.0))
    words = 300 + 2  # what a tokenizer would make of it, about
    assert held.calls == 1 and held.input_tokens > words
    wire = json.dumps([m.model_dump(exclude_defaults=True) for m in MESSAGES])
    assert held.input_tokens >= len(wire) / CHARS_PER_TOKEN
    assert held.output_tokens == 64
    assert held.cost == pytest.approx((held.input_tokens * 2.0 + 64 * 8.0) / 1_000_000)


async def test_a_client_holds_its_max_tokens_else_its_output_allowance() -> None:
    given = {"base_url": "http://127.0.0.1:1/v1", "api_key": SecretStr("k"), "model": "m"}
    async with OpenAIChatClient(ModelSettings(**given, max_tokens=50)) as bounded:
        assert bounded.estimate(MESSAGES, TOOLS).output_tokens == 50
    async with OpenAIChatClient(ModelSettings(**given, output_estimate=300)) as unbounded:
        assert unbounded.estimate(MESSAGES, ()).output_tokens == 300
        assert unbounded.estimate(MESSAGES, ()).cost == 0, "no prices, no cost"


def test_the_output_allowance_is_a_setting() -> None:
    env = {
        "BH_MODEL_BASE_URL": "http://127.0.0.1:1/v1",
        "BH_MODEL_API_KEY": "k",
        "BH_MODEL_NAME": "m",
        "BH_MODEL_OUTPUT_ESTIMATE": "2048",
    }
    assert ModelSettings.from_env(environ=env).output_estimate == 2048
    assert (
        ModelSettings.from_env(environ={**env, "BH_MODEL_OUTPUT_ESTIMATE": ""}).output_estimate
        == 1024
    )
