"""What model calls used, what they cost, and the budgets that bound them.

Every model response's usage is recorded with the response (its entry), summed on the
task that made the call (``Task.usage``) and on the session (the ``usage`` document,
by model), in the same commit as the response. Cost is computed from the prices the
Brain's model configuration declares (per million tokens); without prices it is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from pydantic import Field, model_validator

from contracts.model import Frozen

#: The session document the kernel keeps the totals in.
USAGE_DOCUMENT: Final = "usage"
#: The control-document member with the session's budget.
BUDGET: Final = "budget"
_MILLION: Final = 1_000_000


class Prices(Frozen):
    """Prices per million tokens, in the deployment's currency (say, USD). Cached
    prompt tokens are billed at ``cached`` instead of ``input``."""

    input: float = Field(default=0.0, ge=0)
    output: float = Field(default=0.0, ge=0)
    cached: float | None = Field(default=None, ge=0)


class Usage(Frozen):
    """Model calls and their tokens; ``input_tokens`` include ``cached_tokens``."""

    calls: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    cost: float = Field(default=0.0, ge=0)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost=round(self.cost + other.cost, 9),
        )

    @classmethod
    def of_call(cls, counts: Mapping[str, int], prices: Prices | None = None) -> Usage:
        """One call's usage from the server's counts (OpenAI's names)."""
        prompt = max(0, counts.get("prompt_tokens", 0))
        completion = max(0, counts.get("completion_tokens", 0))
        cached = min(prompt, max(0, counts.get("cached_tokens", 0)))
        cost = 0.0
        if prices is not None:
            cached_price = prices.input if prices.cached is None else prices.cached
            fresh = prompt - cached
            billed = fresh * prices.input + cached * cached_price + completion * prices.output
            cost = round(billed / _MILLION, 9)
        return cls(
            calls=1,
            input_tokens=prompt,
            output_tokens=completion,
            cached_tokens=cached,
            cost=cost,
        )


class SessionUsage(Frozen):
    """The ``usage`` document's body: every model call of the session, and by model."""

    total: Usage = Field(default_factory=Usage)
    by_model: dict[str, Usage] = Field(default_factory=dict)


class ModelUsage(Frozen):
    """A call's usage and the model that answered it (``Effects.usage``)."""

    model: str
    usage: Usage


class Budget(Frozen):
    """A bound on a session's (or one agent task's) model use: tokens, cost, or both.
    When it is reached, the next model call is not made: the task waits for approval to
    go on for one more budget's worth from there (``ask``), or fails (``fail``)."""

    tokens: int | None = Field(default=None, gt=0)
    cost: float | None = Field(default=None, gt=0)
    on_exceed: Literal["ask", "fail"] = "ask"

    @model_validator(mode="after")
    def _bounds_something(self) -> Budget:
        if self.tokens is None and self.cost is None:
            raise ValueError("a budget bounds tokens, cost, or both")
        return self

    def reached(self, used: Usage, since: Usage | None = None) -> str | None:
        """What of it ``used`` has reached (None: neither), counting from ``since`` (the
        usage when someone last allowed one more budget's worth)."""
        start = since or Usage()
        tokens, cost = used.tokens - start.tokens, used.cost - start.cost
        if self.tokens is not None and tokens >= self.tokens:
            return f"{tokens:,} of {self.tokens:,} tokens"
        if self.cost is not None and cost >= self.cost:
            return f"{cost:.4f} of {self.cost:.4f} in cost"
        return None
