"""A model client that counts its calls, tokens and cost (``brain.metrics``) and traces
each call as a ``chat {model}`` span (``runtime.tracing``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from opentelemetry.trace import SpanKind

from brain.metrics import BrainMetrics
from brain.model.client import ModelClient
from brain.model.messages import ChatMessage, ModelReply, ToolSchema
from contracts import ModelRejected, ModelUnavailable
from contracts.usage import Usage
from runtime.tracing import TRACER


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
        with TRACER.start_as_current_span(
            f"chat {self.model}",
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": self.model},
        ) as span:
            reply = await self._complete(messages, tools, request_id, on_text)
            usage = Usage.of_call(reply.usage)
            span.set_attributes(
                {
                    "gen_ai.response.model": reply.model or self.model,
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                    "gen_ai.response.finish_reasons": [reply.finish_reason],
                }
            )
        self.metrics.model_call(
            self.model,
            "ok",
            seconds=time.monotonic() - started,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=reply.cost,
        )
        return reply

    def estimate(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Usage:
        return self.client.estimate(messages, tools)

    async def _complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        request_id: str,
        on_text: Callable[[str], None] | None,
    ) -> ModelReply:
        try:
            return await self.client.complete(
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

    async def aclose(self) -> None:
        await self.client.aclose()
