"""The fence an attempt's request carries to the service it calls.

An operation's attempt has a deadline on the store's clock: once it (and the takeover
margin) has passed, another executor may ask the service whether the operation
happened, and run it again when it did not. A request of the old attempt that reaches
the service after that — held in a buffer, sent by a process that was frozen between
its last check and its write — must not be acted on, or the action happens twice. So
the request carries its operation id and its attempt's deadline, and the service
refuses it once the deadline has passed (a fencing token the resource checks):

=====================================  ====================================================
header                                 value
=====================================  ====================================================
``Brainhands-Operation-Id``            the operation id (also the idempotency key)
``Brainhands-Attempt-Deadline``        the attempt's deadline, RFC 3339 in UTC, on the
                                       store's clock
=====================================  ====================================================

The Brain adds them to in-process tools' requests (``brain.attempt.AttemptTransport``);
the Hands give a sandboxed tool the same as ``BH_OPERATION_ID`` and
``BH_ATTEMPT_DEADLINE``. A service checks them with ``AttemptFence.of(headers)`` and
``fence.late(now)``. Its clock must agree with the store's to within the takeover margin
(2 s; a service on NTP and a store on NTP do), or it may accept a request up to their
difference late.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from pydantic import ValidationError

from contracts.model import AwareDatetime, Frozen, Identifier

OPERATION_HEADER: Final = "Brainhands-Operation-Id"
DEADLINE_HEADER: Final = "Brainhands-Attempt-Deadline"
#: the environment a sandboxed tool finds its attempt's deadline in
DEADLINE_VARIABLE: Final = "BH_ATTEMPT_DEADLINE"


class AttemptFence(Frozen):
    """The operation and deadline a request was sent under."""

    operation_id: Identifier
    deadline: AwareDatetime

    def headers(self) -> dict[str, str]:
        return {OPERATION_HEADER: self.operation_id, DEADLINE_HEADER: self.deadline.isoformat()}

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> AttemptFence | None:
        """The fence a request's headers carry; None when they carry none (or a malformed
        one: a service decides whether it requires a fence)."""
        operation, deadline = _header(headers, OPERATION_HEADER), _header(headers, DEADLINE_HEADER)
        if operation is None or deadline is None:
            return None
        try:
            return cls.model_validate({"operation_id": operation, "deadline": deadline})
        except ValidationError:
            return None

    def late(self, now: datetime) -> bool:
        """Whether a request under this fence arrived after its attempt's deadline."""
        return now >= self.deadline


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    return value
