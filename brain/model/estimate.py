"""What a model call may use, known before it is made: the estimate a budget or a
shared token limit holds for the call until its real usage is known.

The prompt is counted as one token per ``CHARS_PER_TOKEN`` characters of its messages
and tool schemas as JSON. Tokenizers average about 4 characters per token on English
text and JSON, so 3 errs high, as an estimate that holds a place should. The answer is
counted at the most it may be: the request's ``max_tokens`` when one is set, else an
allowance (``ModelSettings.output_estimate``). Text in scripts that tokenize densely
(Chinese, say: about one token per character) is counted low; set ``max_tokens``, or a
larger allowance, where that matters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from brain.model.messages import ChatMessage, ToolSchema
from contracts.usage import Prices, Usage

#: characters of a prompt's JSON counted as one token
CHARS_PER_TOKEN: Final = 3


def estimate(
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSchema],
    *,
    output_tokens: int,
    prices: Prices | None = None,
) -> Usage:
    """One call's usage as it may be at most (``calls`` 1, cost by ``prices``)."""
    said = [message.model_dump(exclude_defaults=True) for message in messages]
    offered = [tool.model_dump(exclude_defaults=True) for tool in tools]
    size = len(json.dumps(said)) + (len(json.dumps(offered)) if offered else 0)
    prompt = -(-size // CHARS_PER_TOKEN)
    counts = {"prompt_tokens": prompt, "completion_tokens": output_tokens}
    return Usage.of_call(counts, prices)
