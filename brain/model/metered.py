"""A model client that counts its calls, tokens and cost (``brain.metrics``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from brain.metrics import BrainMetrics
from brain.model.client import ModelClient
from brain.model.messages import ChatMessage, ModelReply, ToolSchema
from contracts import ModelRejected, ModelUnavailable
from contracts.usage import Usage


class MeteredModel:
    """``client``, with every call counted under ``model`` (the configured name: the
    metric's label stays one series per configuration, whatever the server answers)."""

    def __init__(self, client: ModelClient, metrics: BrainMetrics, model: str) -> None:
        self.client = client
        self.metrics = metrics
        self.model = model

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSchema] = (),
        request_id: str,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        started = time.monotonic()
        try:
            reply = await self.client.complete(
                messages, tools=tools, request_id=request_id, on_text=on_text
            )
        except ModelUnavailable:
            self.metrics.model_call(self.model, "unavailable")
            raise
        except ModelRejected:
            self.metrics.model_call(self.model, "rejected")
            raise
        except Exception:
            self.metrics.model_call(self.model, "error")
            raise
        usage = Usage.of_call(reply.usage)
        self.metrics.model_call(
            self.model,
            "ok",
            seconds=time.monotonic() - started,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=reply.cost,
        )
        return reply

    async def aclose(self) -> None:
        await self.client.aclose()
