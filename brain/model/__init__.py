"""Model access for the Brain: one client protocol, an OpenAI-compatible client over httpx,
and a scripted model server speaking the same HTTP API for tests and the offline demo.

The client makes exactly one attempt per call and reports failures in the project's error
tree (``ModelUnavailable`` is retryable, ``ModelRejected`` is not); retries and backoff are
durable task state, decided by the caller.
"""

from brain.model.client import ModelClient
from brain.model.messages import ChatMessage, ModelReply, ToolCall, ToolSchema
from brain.model.openai import OpenAIChatClient
from brain.model.settings import ModelSettings

__all__ = [
    "ChatMessage",
    "ModelClient",
    "ModelReply",
    "ModelSettings",
    "OpenAIChatClient",
    "ToolCall",
    "ToolSchema",
]
