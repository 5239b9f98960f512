"""JSON shapes of the example email service, shared by the service and its client."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from contracts.model import AwareDatetime, Frozen

# Deliberately loose: one "@" with something on both sides, no whitespace.
_EMAIL_ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+$")


class SendRequest(Frozen):
    """Body of ``POST /messages``; ``operation_id`` is the idempotency key."""

    operation_id: str = Field(min_length=1, max_length=200)
    to: str = Field(max_length=320)
    subject: str = Field(max_length=998)
    body: str

    @field_validator("to")
    @classmethod
    def _address(cls, value: str) -> str:
        if not _EMAIL_ADDRESS.match(value):
            raise ValueError("must be an email address like name@example.com")
        return value


class Receipt(Frozen):
    """The service's answer to a send, and to a query for the same operation."""

    operation_id: str
    message_id: str
    status: str
    to: str


class SentMessage(Frozen):
    """One message the service has sent, as recorded in its ledger."""

    operation_id: str
    message_id: str
    to: str
    subject: str
    body: str
    sent_at: AwareDatetime

    def receipt(self) -> Receipt:
        return Receipt(
            operation_id=self.operation_id, message_id=self.message_id, status="sent", to=self.to
        )

    def same_content(self, request: SendRequest) -> bool:
        return (self.to, self.subject, self.body) == (request.to, request.subject, request.body)


class Ledger(Frozen):
    """Everything the service sent, in send order, and how often each operation was POSTed."""

    messages: tuple[SentMessage, ...] = ()
    requests: dict[str, int] = Field(default_factory=dict)
    #: sends refused because they arrived after their attempt's deadline, by operation
    late: dict[str, int] = Field(default_factory=dict)


class Faults(Frozen):
    """Fault switch: accept the next ``drop_responses`` sends (of ``operation_id`` only,
    when given) but never answer them."""

    drop_responses: int = Field(default=0, ge=0)
    hold_seconds: float = Field(default=5.0, ge=0)
    operation_id: str | None = None
