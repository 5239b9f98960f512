"""Operation records: conditional create, conditional transitions, write-once results.

Each revision of an operation is its own create-once item (``op/<id>/rev/<rev>``), so a
transition from rev n succeeds for exactly one writer: the one that creates rev n+1.
A result is written once, for an operation on record, in that operation's session.
Leaving ``uncertain`` needs a recorded decision: who decided (``decided_by``) and why
(``decision``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from contracts import (
    OPERATION_TRANSITIONS,
    AlreadyExists,
    ConflictError,
    InvalidInput,
    InvalidTransition,
    NotFound,
    Operation,
    OperationMismatch,
    OperationResult,
    OperationStatus,
    OutputPreview,
    ReadOnlyStore,
    Refused,
    utcnow,
)
from session_store import layout
from session_store.backend import Backend, ItemExists
from session_store.codec import decode, encode


class OperationLog:
    def __init__(self, backend: Backend, *, max_record_bytes: int, read_only: bool) -> None:
        self._backend = backend
        self._limit = max_record_bytes
        self._read_only = read_only

    async def create(self, operation: Operation) -> Operation:
        """Create rev 1; ``AlreadyExists`` (with the current status) if it exists."""
        self._writable()
        if operation.rev != 1:
            raise InvalidInput(f"a new operation must have rev 1, not {operation.rev}")
        data = encode(operation, limit=self._limit, what=f"operation {operation.operation_id}")
        await self._backend.put(
            layout.session_operations_partition(operation.session_id),
            operation.operation_id,
            b"",
        )
        partition = layout.operation_partition(operation.operation_id)
        try:
            await self._backend.create(partition, layout.rev_item(1), data)
        except ItemExists:
            current = await self.get(operation.operation_id)
            if current is not None and current.rev == 1 and current == operation:
                return operation  # our own write, retried by the transport
            raise AlreadyExists(
                f"operation {operation.operation_id!r} already exists",
                operation_id=operation.operation_id,
                status=None if current is None else current.status.value,
            ) from None
        return operation

    async def get(self, operation_id: str) -> Operation | None:
        found = await self._backend.last(layout.operation_partition(operation_id))
        if found is None:
            return None
        item, data = found
        return decode(data, Operation, where=f"{layout.operation_partition(operation_id)}/{item}")

    async def transition(
        self, current: Operation, status: OperationStatus, **changes: Any
    ) -> Operation:
        """Move ``current`` (rev n) to ``status`` as rev n+1; exactly one writer wins."""
        self._writable()
        if status not in OPERATION_TRANSITIONS[current.status]:
            raise InvalidTransition(
                f"operation {current.operation_id!r} cannot go from {current.status.value} "
                f"to {status.value}; allowed: "
                f"{sorted(s.value for s in OPERATION_TRANSITIONS[current.status]) or 'none'}",
                operation_id=current.operation_id,
            )
        forbidden = {"operation_id", "session_id", "rev", "v", "type"} & changes.keys()
        if forbidden:
            raise InvalidInput(f"cannot change {sorted(forbidden)} of an operation")
        if current.status is OperationStatus.UNCERTAIN and not (
            changes.get("decided_by") and changes.get("decision")
        ):
            raise InvalidTransition(
                f"operation {current.operation_id!r} is uncertain: leaving that status needs "
                "a recorded decision (decided_by: who, decision: why)",
                operation_id=current.operation_id,
            )
        updated = Operation.model_validate(
            {
                **current.model_dump(),
                **changes,
                "status": status,
                "rev": current.rev + 1,
                "updated_at": utcnow(),
            }
        )
        data = encode(updated, limit=self._limit, what=f"operation {current.operation_id}")
        partition = layout.operation_partition(current.operation_id)
        try:
            await self._backend.create(partition, layout.rev_item(updated.rev), data)
        except ItemExists:
            winner = await self._backend.get(partition, layout.rev_item(updated.rev))
            if winner == data:
                return updated
            raise ConflictError(
                f"operation {current.operation_id!r} rev {current.rev} was already "
                "superseded by another writer; reload it",
                operation_id=current.operation_id,
                rev=current.rev,
            ) from None
        return updated

    async def put_result(self, result: OperationResult) -> OperationResult:
        """Write the result once; an identical retry returns it, a different one is refused.

        The operation must be on record, in the result's session.
        """
        self._writable()
        self._check_owner(await self.get(result.operation_id), result)
        return await self._write_result(result)

    async def settle(self, result: OperationResult, *, decided_by: str, decision: str) -> Operation:
        """An operator's verdict on an operation whose outcome is unknown: write its
        result, then close the record with who decided and why. Only an ``uncertain``
        operation is settled (``Refused`` otherwise): one that runs or is about to has
        an executor that will record what happened, and a final one keeps its result."""
        self._writable()
        current = self._check_owner(await self.get(result.operation_id), result)
        if current.status is not OperationStatus.UNCERTAIN:
            raise Refused(
                f"operation {result.operation_id!r} is {current.status.value}: only an "
                "uncertain operation can be settled (an operation that is running has an "
                "executor that will record what happened; a final one keeps its result)",
                operation_id=result.operation_id,
                status=current.status.value,
            )
        await self._write_result(result)
        status = OperationStatus.SUCCEEDED if result.succeeded else OperationStatus.FAILED
        return await self.transition(current, status, decided_by=decided_by, decision=decision)

    @staticmethod
    def _check_owner(operation: Operation | None, result: OperationResult) -> Operation:
        if operation is None:
            raise NotFound(
                f"operation {result.operation_id!r} is not on record; results are written "
                "for recorded operations only",
                operation_id=result.operation_id,
            )
        if operation.session_id != result.session_id:
            raise OperationMismatch(
                f"operation {result.operation_id!r} belongs to session "
                f"{operation.session_id}, not {result.session_id}; its result stays there",
                operation_id=result.operation_id,
            )
        return operation

    async def _write_result(self, result: OperationResult) -> OperationResult:
        data = encode(result, limit=self._limit, what=f"result of {result.operation_id}")
        partition = layout.result_partition(result.operation_id)
        try:
            await self._backend.create(partition, layout.RESULT_ITEM, data)
        except ItemExists:
            existing = await self.result(result.operation_id)
            if existing == result:
                return result
            raise AlreadyExists(
                f"operation {result.operation_id!r} already has a result; results are written once",
                operation_id=result.operation_id,
            ) from None
        return result

    async def result(self, operation_id: str) -> OperationResult | None:
        partition = layout.result_partition(operation_id)
        data = await self._backend.get(partition, layout.RESULT_ITEM)
        if data is None:
            return None
        return decode(data, OperationResult, where=f"{partition}/{layout.RESULT_ITEM}")

    async def put_preview(self, preview: OutputPreview) -> None:
        """Save a running operation's output preview over the last one (not create-once:
        a preview is a snapshot and may be lost; the result is the truth)."""
        self._writable()
        data = encode(preview, limit=self._limit, what="output preview")
        partition = layout.preview_partition(preview.operation_id)
        await self._backend.put(partition, layout.PREVIEW_ITEM, data)

    async def preview(self, operation_id: str) -> OutputPreview | None:
        partition = layout.preview_partition(operation_id)
        data = await self._backend.get(partition, layout.PREVIEW_ITEM)
        where = f"{partition}/{layout.PREVIEW_ITEM}"
        return None if data is None else decode(data, OutputPreview, where=where)

    async def list_for_session(self, session_id: str) -> list[Operation]:
        ids = await self._backend.keys(layout.session_operations_partition(session_id))
        found = await asyncio.gather(*(self.get(operation_id) for operation_id in ids))
        return [operation for operation in found if operation is not None]

    def _writable(self) -> None:
        if self._read_only:
            raise ReadOnlyStore("this store was opened read-only; operations cannot change")
