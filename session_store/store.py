"""The Session Store: the one place where task progress, intents and results become facts."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from datetime import timedelta
from types import TracebackType

from pydantic import JsonValue

from contracts import (
    INLINE_RESULT_BYTES,
    AlreadyExists,
    BlobRef,
    Commit,
    CommitRecord,
    ConflictError,
    Fork,
    Intent,
    InvalidInput,
    Operation,
    OperationResult,
    OperationStatus,
    OutputPreview,
)
from contracts.model import check_id
from contracts.workspace import AppliedVersion, WorkspaceVersion
from session_store.archive import Archive
from session_store.backend import Backend
from session_store.baselines import Baselines
from session_store.blobs import BlobStore
from session_store.catalog import ToolCatalog
from session_store.collection import Collector, Touches, retention_of
from session_store.directory import SessionDirectory
from session_store.fleet import Fleet
from session_store.handle import SessionHandle
from session_store.index import ActiveIndex
from session_store.log import CommitLog
from session_store.operations import OperationLog
from session_store.settings import StoreSettings
from session_store.uploads import Uploads
from session_store.versions import VersionIndex
from session_store.workspaces import WorkspaceStore

log = logging.getLogger(__name__)

#: commit records read at once by ``commits`` and ``history``
COMMIT_PAGE = 256


class SessionStore:
    """Sessions (commit logs with baselines), blobs, operation records and the index of
    active sessions, on one backend. Open one with ``session_store.open_store(url)``.
    """

    def __init__(self, backend: Backend, settings: StoreSettings | None = None) -> None:
        self.settings = settings = settings or StoreSettings()
        self.backend = backend
        #: the store's time: what every deadline another process judges is written and
        #: read on (``session_store.clock``; invariant 17)
        self.clock = backend.clock
        _check_limits(settings, backend)
        read_only = settings.read_only
        self.blobs = BlobStore(
            backend,
            max_blob_bytes=settings.max_blob_bytes,
            chunk_bytes=settings.blob_chunk_bytes,
            read_only=read_only,
        )
        self.operations = OperationLog(
            backend, max_record_bytes=settings.max_record_bytes, read_only=read_only
        )
        self.tools = ToolCatalog(
            backend, max_record_bytes=settings.max_record_bytes, read_only=read_only
        )
        self.index = ActiveIndex(backend)
        #: every session ever created, listed by id (``session_store.directory``)
        self.directory = SessionDirectory(backend)
        #: each Hands' last beat, for operators (``session_store.fleet``)
        self.fleet = Fleet(backend)
        #: workspace files and versions (``session_store.workspaces``)
        self._versions = VersionIndex(backend, read_only=read_only)
        touches = Touches(backend, self.clock)
        self.workspaces = WorkspaceStore(backend, self.blobs, touches, read_only=read_only)
        self.workspaces.collector = Collector(
            backend,
            touches,
            self.clock,
            sessions=self._every_session,
            retained=self.retained_versions,
            indexed=self._indexed_versions,
            manifest=self.workspaces.manifest,
            grace=timedelta(seconds=settings.workspace_grace_seconds),
        )
        uploads = Uploads(backend, self.blobs)
        self._archive = Archive(backend, self.blobs)
        self._baselines = Baselines(
            backend,
            self.blobs,
            self._archive,
            uploads,
            kept=settings.baselines_kept,
            # a state kept inline must leave its record room below the record limit
            inline_limit=min(settings.baseline_inline_bytes, settings.max_record_bytes // 2),
        )
        self._log = CommitLog(
            backend,
            self._baselines,
            self._archive,
            self.index,
            settings,
            self.directory,
            self.workspaces,
            self._versions,
        )
        self._background: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> SessionStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def read_only(self) -> bool:
        return self.settings.read_only

    async def session(self, session_id: str) -> SessionHandle:
        """Load a session (an empty one if it has no commits yet)."""
        _check_identifier(session_id, "session id")
        state, replayed, loaded = await self._log.load(session_id)
        handle = SessionHandle(
            state,
            log=self._log,
            baselines=self._baselines,
            archive=self._archive,
            baseline_every=self.settings.baseline_every,
            spawn=self._keep,
            problems=loaded.problems,
        )
        # A writer died before its baseline, or the newest one is damaged: write one now.
        behind = replayed >= self.settings.baseline_every or loaded.problems
        if behind and not self.read_only:
            handle.schedule_baseline()
        return handle

    async def commits(
        self, session_id: str, *, after: int = 0, limit: int = COMMIT_PAGE
    ) -> list[CommitRecord]:
        """The session's commit records after seq ``after``, in seq order: one page of
        at most ``limit``, typed and checked (the public reader of a log; a fork's log
        starts with its fork commit)."""
        _check_identifier(session_id, "session id")
        if after < 0 or limit < 1:
            raise InvalidInput(f"after must be >= 0 and limit >= 1, got {after} and {limit}")
        return await self._log.records(session_id, after=after, limit=limit)

    async def history(
        self, session_id: str, *, after: int = 0, page: int = COMMIT_PAGE
    ) -> AsyncIterator[CommitRecord]:
        """Every commit record after seq ``after``, read a page at a time."""
        while records := await self.commits(session_id, after=after, limit=page):
            for record in records:
                yield record
            after = records[-1].seq

    async def fork(self, session_id: str, *, at: int, into: str) -> SessionHandle:
        """Start session ``into`` as ``session_id`` was right after commit ``at``: one
        commit (``Commit.fork``) that refers to that history instead of copying it. The
        fork has its open work, recent window and documents; operations committed
        before ``at`` keep their ids (their results are reused), any new one gets an id
        of the fork's. ``session_id`` is only read. ``AlreadyExists`` when ``into`` has
        commits; ``NotFound`` past ``session_id``'s head."""
        _check_identifier(into, "session id")
        handle = await self.session(into)
        try:
            await handle.commit(Commit(fork=Fork(session_id=session_id, seq=at)), fence=None)
        except ConflictError:
            raise AlreadyExists(f"session {into!r} already exists", key=into) from None
        handle.schedule_baseline()  # its loads then stop reading the origin's log
        return handle

    async def session_at(self, session_id: str, seq: int) -> SessionHandle:
        """The session as it was right after commit ``seq``, to read (never to commit
        through: its head has moved on). ``NotFound`` past the head."""
        _check_identifier(session_id, "session id")
        state, loaded = await self._log.load_at(session_id, seq)
        return SessionHandle(
            state,
            log=self._log,
            baselines=self._baselines,
            archive=self._archive,
            baseline_every=self.settings.baseline_every,  # a commit would conflict anyway
            spawn=self._keep,
            problems=loaded.problems,
        )

    async def workspace_versions(
        self, session_id: str, *, until: int | None = None
    ) -> list[AppliedVersion]:
        """The workspace versions the session applied (up to commit ``until``), oldest
        first: each with the commit that made it the head and the operations that commit
        applied; a fork's list begins with its origin's up to the fork point. Read from
        the versions index (``session_store.versions``), not by replaying the log."""
        _check_identifier(session_id, "session id")
        first = await self.commits(session_id, limit=1)
        fork = first[0].commit.fork if first else None
        origin = None
        if fork is not None:
            origin = (await self.session(session_id)).state.origin
        return await self._versions.applied(session_id, origin, until=until)

    async def retained_versions(self, session_id: str) -> list[WorkspaceVersion]:
        """The versions a collection keeps for the session: its head, the last
        ``keep_versions`` it applied (its ``retention``), the bases its open calls mount
        and the versions their stored results produced (``docs/workspaces.md``)."""
        state = (await self.session(session_id)).state
        keep = retention_of(state).keep_versions
        indexed = await self._versions.entries(session_id)
        kept = [entry.version for entry in indexed[-keep:]]
        kept += [state.workspace] if state.workspace is not None else []
        for intent in state.intents.values():
            mount = intent.dispatch.workspace
            kept += [mount.base] if mount is not None and mount.base is not None else []
            if mount is not None:
                result = await self.operations.result(intent.operation_id)
                kept += [result.version] if result and result.version else []
        return kept

    async def _indexed_versions(self, session_id: str) -> list[WorkspaceVersion]:
        return [entry.version for entry in await self._versions.entries(session_id)]

    async def _every_session(self) -> AsyncIterator[str]:
        after = None
        while True:
            found, after = await self.directory.page(after=after, limit=500)
            for session_id in found:
                yield session_id
            if after is None:
                return

    async def intent(self, session_id: str, operation_id: str) -> Intent | None:
        """The committed intent of ``operation_id`` in the session's log (its current
        state: None once the result is applied or the task ended, or if never committed)."""
        handle = await self.session(session_id)
        return handle.state.intents.get(operation_id)

    async def active_sessions(
        self, *, verify: Callable[[str], bool] | None = None
    ) -> AsyncGenerator[str, None]:
        """Sessions that may have work left; a hint list for the reconciler. With
        ``verify``, a session marked quiet only when ``verify(session_id)`` is true
        (``session_store.index``)."""
        async for session_id in self.index.sessions(verify=verify):
            yield session_id

    async def some_active_sessions(self, bound: int) -> tuple[list[str], bool]:
        """Up to ``bound`` active sessions, and whether that was all of them."""
        sessions: list[str] = []
        iterator = self.active_sessions()
        try:
            async for session_id in iterator:
                if len(sessions) == bound:
                    return sessions, False
                sessions.append(session_id)
        finally:
            await iterator.aclose()
        return sessions, True

    async def sweep(self, session_id: str) -> bool:
        """Drop a finished session from the active index; returns whether it is active."""
        handle = await self.session(session_id)
        if handle.state.is_active:
            await self.index.mark(session_id)
            return True
        if not self.read_only:
            await self.index.sweep(session_id, finished_at_seq=handle.seq)
        return False

    async def put_blob(self, data: bytes, media_type: str = "application/octet-stream") -> BlobRef:
        return await self.blobs.put(data, media_type)

    async def get_blob(self, ref: BlobRef) -> bytes:
        return await self.blobs.get(ref)

    async def put_output(self, output: JsonValue) -> tuple[JsonValue, BlobRef | None]:
        """An operation's output as a result record carries it: inline when small, else
        ``(None, blob)`` with the JSON stored as a blob (``INLINE_RESULT_BYTES``)."""
        data = json.dumps(output).encode()
        if len(data) <= INLINE_RESULT_BYTES:
            return output, None
        return None, await self.put_blob(data, "application/json")

    async def create_operation(self, operation: Operation) -> Operation:
        return await self.operations.create(operation)

    async def get_operation(self, operation_id: str) -> Operation | None:
        return await self.operations.get(operation_id)

    async def transition_operation(
        self, current: Operation, status: OperationStatus, **changes: object
    ) -> Operation:
        return await self.operations.transition(current, status, **changes)

    async def put_operation_result(self, result: OperationResult) -> OperationResult:
        return await self.operations.put_result(result)

    async def settle_operation(
        self, result: OperationResult, *, decided_by: str, decision: str
    ) -> Operation:
        """An operator's verdict on an uncertain operation: its result, who, and why."""
        return await self.operations.settle(result, decided_by=decided_by, decision=decision)

    async def get_operation_result(self, operation_id: str) -> OperationResult | None:
        return await self.operations.result(operation_id)

    async def put_output_preview(self, preview: OutputPreview) -> None:
        await self.operations.put_preview(preview)

    async def get_output_preview(self, operation_id: str) -> OutputPreview | None:
        return await self.operations.preview(operation_id)

    async def list_operations(self, session_id: str) -> list[Operation]:
        return await self.operations.list_for_session(session_id)

    async def flush(self) -> None:
        """Wait for background work (baselines) started so far."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        await self.flush()
        await self.backend.close()

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _check_limits(settings: StoreSettings, backend: Backend) -> None:
    if settings.max_record_bytes > backend.max_item_bytes:
        raise InvalidInput(
            f"max_record_bytes is {settings.max_record_bytes:,} bytes, but {backend.description} "
            f"holds at most {backend.max_item_bytes:,} bytes in one record; set "
            "max_record_bytes at or below that (large payloads belong in blobs)",
            max_record_bytes=settings.max_record_bytes,
            backend_limit=backend.max_item_bytes,
        )


def _check_identifier(value: str, what: str) -> None:
    check_id(value, what)  # the message shows an excerpt: an id may be 10 kB of anything
