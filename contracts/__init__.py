"""Shared contracts of brainhands: pure data and the error tree.

This package imports nothing from the other brainhands packages; all of them import it.
"""

from contracts.baseline import BaselineRecord, EntrySegment
from contracts.blob import BlobRef
from contracts.commit import Commit, CommitReceipt, CommitRecord
from contracts.document import Document, DocumentPatch, DocumentPut, DocumentWrite
from contracts.entry import Entry, EntryKind
from contracts.errors import (
    AlreadyApplied,
    AlreadyExists,
    BrainhandsError,
    ConflictError,
    CorruptRecord,
    ErrorInfo,
    FencedError,
    InvalidInput,
    InvalidStoreUrl,
    InvalidTransition,
    LeaseLost,
    ModelRejected,
    ModelUnavailable,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    ReadOnlyStore,
    RecordError,
    SandboxTimeout,
    StoreMissing,
    StoreUnavailable,
    TaskBlocked,
    ToolFailed,
    UnknownRecordVersion,
)
from contracts.model import Frozen, Identifier, utcnow
from contracts.operation import (
    OPERATION_TRANSITIONS,
    Operation,
    OperationResult,
    OperationStatus,
    ReplayPolicy,
)
from contracts.outbox import OutboxMessage
from contracts.submission import Submission, SubmissionStatus
from contracts.task import JoinPolicy, Outcome, SleepCondition, Task, TaskStatus, WaitCondition

__all__ = [
    "OPERATION_TRANSITIONS",
    "AlreadyApplied",
    "AlreadyExists",
    "BaselineRecord",
    "BlobRef",
    "BrainhandsError",
    "Commit",
    "CommitReceipt",
    "CommitRecord",
    "ConflictError",
    "CorruptRecord",
    "Document",
    "DocumentPatch",
    "DocumentPut",
    "DocumentWrite",
    "Entry",
    "EntryKind",
    "EntrySegment",
    "ErrorInfo",
    "FencedError",
    "Frozen",
    "Identifier",
    "InvalidInput",
    "InvalidStoreUrl",
    "InvalidTransition",
    "JoinPolicy",
    "LeaseLost",
    "ModelRejected",
    "ModelUnavailable",
    "NotFound",
    "Operation",
    "OperationResult",
    "OperationStatus",
    "OutboxMessage",
    "Outcome",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "ReadOnlyStore",
    "RecordError",
    "ReplayPolicy",
    "SandboxTimeout",
    "SleepCondition",
    "StoreMissing",
    "StoreUnavailable",
    "Submission",
    "SubmissionStatus",
    "Task",
    "TaskBlocked",
    "TaskStatus",
    "ToolFailed",
    "UnknownRecordVersion",
    "WaitCondition",
    "utcnow",
]
