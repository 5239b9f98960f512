"""The one error tree of brainhands.

Every error that crosses a process boundary carries a stable ``code``; clients match on
codes, never on messages. ``retryable`` says whether the same call may succeed later
without the caller changing anything but its view of the world (reload, back off).

A ``ConflictError`` is only ever a lost race (another writer took the seq or revision
first): reload and decide again. A ``Refused`` write contradicts what the session or the
operation already holds (applied twice, created twice, a stale document version, another
session's operation); reloading does not change the answer.

::

    BrainhandsError                      code
    ├── InvalidInput                     invalid_input        terminal
    │   ├── PayloadTooLarge              payload_too_large    terminal
    │   ├── InvalidStoreUrl              invalid_store_url    terminal
    │   ├── InvalidTransition            invalid_transition   terminal
    │   └── ReadOnlyStore                read_only            terminal
    ├── NotFound                         not_found            terminal
    │   └── StoreMissing                 store_missing        terminal (bucket/table absent)
    ├── RecordError                      record_error         terminal
    │   ├── UnknownRecordVersion         unknown_record_version
    │   └── CorruptRecord                corrupt_record
    ├── ConflictError                    conflict             retryable after reload
    ├── Refused                          refused              terminal for that write
    │   ├── AlreadyApplied               already_applied
    │   ├── AlreadyExists                already_exists
    │   ├── VersionMismatch              version_mismatch
    │   ├── OperationMismatch            operation_mismatch
    │   ├── AlreadyAnswered              already_answered     (a question: the first wins)
    │   ├── QuestionClosed               question_closed      (its task moved on or ended)
    │   ├── QuestionExpired              question_expired     (its deadline passed first)
    │   ├── Busy                         busy                 (reject: an agent is running)
    │   ├── WorkspaceRefused             workspace_refused    (a tree a workspace may not hold)
    │   └── WorkspaceTooLarge            workspace_too_large  (past the workspace's limits)
    ├── Unauthorized                     unauthorized         an API refused the token
    ├── Forbidden                        forbidden            the token's scope excludes it
    ├── FencedError                      fenced               terminal for that lease
    ├── LeaseLost                        lease_lost           terminal for that lease
    ├── StoreUnavailable                 store_unavailable    retryable
    ├── TooManyRequests                  too_many_requests    retryable (after retry_after s)
    ├── SandboxTimeout                   sandbox_timeout      terminal for that run
    ├── ToolFailed                       tool_failed          terminal for that run
    ├── OutcomeUnknown                   outcome_unknown      verify before any retry
    ├── ModelUnavailable                 model_unavailable    retryable
    ├── ModelRejected                    model_rejected       terminal for that request
    └── TaskBlocked                      task_blocked         until a compatible Brain runs

Third-party exceptions (sqlite3, botocore, redis, nats, docker) are translated into this
tree inside the backend module that calls the library, never further out.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class ErrorInfo(BaseModel):
    """An error as it travels on the wire or sits in a record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    details: dict[str, Any] = {}


class ErrorBody(BaseModel):
    """How an HTTP API answers with an error: ``{"error": {"code", "message", "details"}}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error: ErrorInfo


class BrainhandsError(Exception):
    """Root of the tree; ``code`` is stable, ``details`` is JSON-serialisable context."""

    code: ClassVar[str] = "error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def info(self) -> ErrorInfo:
        return ErrorInfo(code=self.code, message=self.message, details=self.details)

    @classmethod
    def from_info(cls, info: ErrorInfo) -> BrainhandsError:
        """Rebuild the most specific known error for a wire ``code``."""
        error_class = _BY_CODE.get(info.code, BrainhandsError)
        return error_class(info.message, **info.details)


class InvalidInput(BrainhandsError):
    code = "invalid_input"


class PayloadTooLarge(InvalidInput):
    code = "payload_too_large"


class InvalidStoreUrl(InvalidInput):
    code = "invalid_store_url"


class InvalidTransition(InvalidInput):
    code = "invalid_transition"


class ReadOnlyStore(InvalidInput):
    code = "read_only"


class NotFound(BrainhandsError):
    code = "not_found"


class StoreMissing(NotFound):
    code = "store_missing"


class RecordError(BrainhandsError):
    code = "record_error"


class UnknownRecordVersion(RecordError):
    code = "unknown_record_version"


class CorruptRecord(RecordError):
    code = "corrupt_record"


class ConflictError(BrainhandsError):
    code = "conflict"
    retryable = True


class Refused(BrainhandsError):
    code = "refused"


class AlreadyApplied(Refused):
    code = "already_applied"


class AlreadyExists(Refused):
    code = "already_exists"


class AlreadyAnswered(Refused):
    """A question already has an answer: the first accepted one wins."""

    code = "already_answered"


class QuestionClosed(Refused):
    """A question's task no longer waits for it (cancelled, or it ended)."""

    code = "question_closed"


class QuestionExpired(Refused):
    """An answer came after its question's deadline, which denies it (``on_deadline``
    ``deny``): the door refuses it, and so does the kernel applying one that got in."""

    code = "question_expired"


class Busy(Refused):
    """A message under the ``reject`` policy while its conversation's agent runs."""

    code = "busy"


class VersionMismatch(Refused):
    """A document write's ``expected_version`` is not the version the session holds."""

    code = "version_mismatch"


class WorkspaceRefused(Refused):
    """A tree a workspace may not hold (a device file, a socket, a FIFO, a setuid or
    setgid bit, a path outside its root): the operation fails, the head stays."""

    code = "workspace_refused"


class WorkspaceTooLarge(Refused):
    """A tree past its workspace's limits (bytes or entries): the operation fails, the
    head stays."""

    code = "workspace_too_large"


class OperationMismatch(Refused):
    """An operation id is used by another session, task, tool or with other arguments."""

    code = "operation_mismatch"


class Unauthorized(BrainhandsError):
    """An HTTP API refused the caller's token (HTTP 401)."""

    code = "unauthorized"


class Forbidden(BrainhandsError):
    """An HTTP API's token is valid but its scope does not allow the request (HTTP 403)."""

    code = "forbidden"


class FencedError(BrainhandsError):
    code = "fenced"


class LeaseLost(BrainhandsError):
    code = "lease_lost"


class StoreUnavailable(BrainhandsError):
    code = "store_unavailable"
    retryable = True


class TooManyRequests(BrainhandsError):
    """A limit on what one caller (or everyone) may hold at once is reached, e.g. the
    event streams open per token: retry after ``details["retry_after"]`` seconds (HTTP
    429 with ``Retry-After``)."""

    code = "too_many_requests"
    retryable = True


class SandboxTimeout(BrainhandsError):
    code = "sandbox_timeout"


class ToolFailed(BrainhandsError):
    code = "tool_failed"


class OutcomeUnknown(BrainhandsError):
    """An external action may or may not have happened (e.g. its response was lost).

    Never retried blindly: replay-safe tools re-run with the same operation id, others
    are verified by their query entry point or parked as uncertain.
    """

    code = "outcome_unknown"


class ModelUnavailable(BrainhandsError):
    code = "model_unavailable"
    retryable = True


class ModelRejected(BrainhandsError):
    code = "model_rejected"


class TaskBlocked(BrainhandsError):
    code = "task_blocked"


def _subclasses(root: type[BrainhandsError]) -> list[type[BrainhandsError]]:
    found = [root]
    for child in root.__subclasses__():
        found.extend(_subclasses(child))
    return found


_BY_CODE: dict[str, type[BrainhandsError]] = {c.code: c for c in _subclasses(BrainhandsError)}
