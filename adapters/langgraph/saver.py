"""``BrainhandsSaver``: LangGraph checkpoints in the Session Store.

A thread is a session (``thread_id`` is the session id). Each checkpoint is an immutable
record blob; the ``langgraph`` document holds each namespace's head, tips and pending
writes (``adapters/langgraph/thread.py``). Every ``aput`` and every ``aput_writes`` is
blobs first, then one commit through the saver's ``Journal``, under the writer's fence:
a Brain that lost its lease cannot move the head. "Latest" is the head in log order,
never the largest checkpoint id. The saver is async-only: LangGraph's async loop
(``ainvoke``/``astream``) calls only the async methods.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from adapters.langgraph import thread
from adapters.langgraph.history import Records, walk
from adapters.langgraph.journal import Journal
from adapters.langgraph.record import (
    JsonObject,
    Record,
    decode_value,
    encode_record,
    encode_value,
    ref_json,
)
from contracts import (
    BlobRef,
    Commit,
    Document,
    DocumentPatch,
    DocumentPut,
    Entry,
    EntryKind,
    InvalidInput,
)
from contracts.model import IDENTIFIER_PATTERN, IDENTIFIER_RULE

_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
_ASYNC_ONLY = (
    "BrainhandsSaver is async-only: run the graph with ainvoke/astream "
    "(in a Brain, the Brain runs the graph)"
)
#: blobs this saver knows exist, so an unchanged value is not written again
_KNOWN_BLOBS = 4096


class BrainhandsSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose threads are brainhands sessions.

    ``journal`` commits under the writer's fence (``SessionJournal`` outside a Brain).
    ``session_id``, when given, is the only thread this saver serves (a Brain's graph
    runs in its own session). ``serde`` defaults to LangGraph's ``JsonPlusSerializer``;
    pass an ``EncryptedSerializer`` or one ``with_allowlist`` for stricter decoding.
    """

    def __init__(
        self,
        journal: Journal,
        *,
        session_id: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._journal = journal
        self._only = session_id
        self._records = Records(journal, self.serde)
        self._known: OrderedDict[str, BlobRef] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def records(self) -> Records:
        """The saver's record cache (its ``loads`` count the records read)."""
        return self._records

    # -- reading -------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        session_id = self._session(config)
        ns = _ns(config)
        wanted = get_checkpoint_id(config)
        body = await self._body(session_id)
        member = thread.namespace(body, ns) or {}
        head = member.get("head")
        if head is None:
            return None
        if wanted is None or wanted == head["id"]:
            record = await self._records.load(head["ref"])
            return await self._tuple(session_id, record, thread.pending(body, ns, record.id))
        sealed: dict[str, JsonObject] = {}
        async for record in walk(self._records, (member.get("tips") or {}).values()):
            if record.parent_id == wanted:
                sealed = thread.merged(sealed, record.parent_writes)
            if record.id == wanted:
                writes = thread.merged(sealed, thread.pending(body, ns, wanted))
                return await self._tuple(session_id, record, writes)
        return None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None:
            raise InvalidInput(
                "BrainhandsSaver lists one thread at a time: pass a config with a "
                "thread_id (a session id); listing every thread is not supported"
            )
        session_id = self._session(config)
        body = await self._body(session_id)
        configurable = config.get("configurable") or {}
        if "checkpoint_ns" in configurable:
            members = [thread.namespace(body, configurable["checkpoint_ns"])]
        else:
            members = list(thread.namespaces(body).values())
        wanted = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for member in members:
            if not member or not member.get("tips"):
                continue
            sealed: dict[str, dict[str, JsonObject]] = {}
            async for record in walk(self._records, member["tips"].values()):
                if record.parent_id is not None:
                    sealed[record.parent_id] = thread.merged(
                        sealed.get(record.parent_id, {}), record.parent_writes
                    )
                if not _selected(record, wanted, before_id, filter):
                    continue
                writes = thread.merged(
                    sealed.pop(record.id, {}), thread.pending(body, record.ns, record.id)
                )
                yield await self._tuple(session_id, record, writes)
                if left is not None:
                    left -= 1
                    if left <= 0:
                        return

    # -- writing -------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        session_id = self._session(config)
        ns = _ns(config)
        parent_id = get_checkpoint_id(config)
        async with self._lock(session_id):
            document = await self._journal.document(session_id, thread.DOCUMENT)
            body = {} if document is None else document.body
            parent = await self._find(body, ns, parent_id)
            record = Record(
                id=checkpoint["id"],
                ns=ns,
                depth=1 if parent is None else parent[0].depth + 1,
                parent_id=parent_id,
                parent_ref=None if parent is None else parent[1],
                checkpoint={k: v for k, v in checkpoint.items() if k != "channel_values"},
                metadata=dict(get_checkpoint_metadata(config, metadata)),
                channels=await self._channels(
                    checkpoint, new_versions, None if parent is None else parent[0]
                ),
                parent_writes=thread.pending(body, ns, parent_id) if parent_id else {},
            )
            data, media_type = encode_record(record, self.serde)
            ref = await self._put_blob(data, media_type)
            self._records.remember(ref.digest, record)
            head = _head(record, ref)
            patch = thread.put_patch(body, ns, head=head, parent_id=parent_id)
            version = 0 if document is None else document.version
            note = _note(record, checkpoint)

            def build(_: Mapping[str, Document]) -> Commit:
                return Commit(
                    documents=(
                        DocumentPatch(
                            name=thread.DOCUMENT, patch=patch, create=True, expected_version=version
                        ),
                    ),
                    entries=(note,),
                )

            await self._journal.commit(session_id, build)
        return {
            "configurable": {
                "thread_id": session_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        session_id = self._session(config)
        ns = _ns(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidInput("aput_writes needs the config of a checkpoint (a checkpoint_id)")
        async with self._lock(session_id):
            body = await self._body(session_id)
            stored = thread.pending(body, ns, checkpoint_id)
            fresh: dict[str, JsonObject] = {}
            for position, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, position)
                key = thread.write_key(task_id, idx)
                if key in stored and idx >= 0:
                    continue  # kept as first written: do not even encode it again
                encoded = await encode_value(value, self.serde, self._put_blob)
                fresh[key] = {"task": task_id, "path": task_path, "idx": idx, "channel": channel}
                fresh[key].update(encoded)
            patch = thread.writes_patch(body, ns, checkpoint_id, fresh)
            if patch is None:
                return

            def build(_: Mapping[str, Document]) -> Commit:
                return Commit(
                    documents=(DocumentPatch(name=thread.DOCUMENT, patch=patch, create=True),)
                )

            await self._journal.commit(session_id, build)

    async def adelete_thread(self, thread_id: str) -> None:
        """Forget the thread: nothing is live afterwards, and ``aget_tuple`` and
        ``alist`` find nothing. Logical: the log and the blobs stay (a log is never
        shortened, and blobs may be shared with other checkpoints or forks)."""
        session_id = self._session({"configurable": {"thread_id": thread_id}})
        async with self._lock(session_id):
            document = await self._journal.document(session_id, thread.DOCUMENT)
            if document is None:
                return
            put = DocumentPut(
                name=thread.DOCUMENT,
                body=thread.deleted_body(document.body),
                expected_version=document.version,
            )
            await self._journal.commit(session_id, lambda _: Commit(documents=(put,)))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """InMemorySaver's form: a zero-padded counter, then a random fraction."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the sync API is refused ---------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raise NotImplementedError(_ASYNC_ONLY)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        raise NotImplementedError(_ASYNC_ONLY)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        raise NotImplementedError(_ASYNC_ONLY)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        raise NotImplementedError(_ASYNC_ONLY)

    def delete_thread(self, thread_id: str) -> None:
        raise NotImplementedError(_ASYNC_ONLY)

    # -- helpers -------------------------------------------------------------------

    def _session(self, config: RunnableConfig) -> str:
        session_id = (config.get("configurable") or {}).get("thread_id")
        if not isinstance(session_id, str) or not _IDENTIFIER.match(session_id):
            raise InvalidInput(
                f"thread_id {session_id!r} is not a session id ({IDENTIFIER_RULE}): a "
                "LangGraph thread on brainhands is a session"
            )
        if self._only is not None and session_id != self._only:
            raise InvalidInput(
                f"thread_id {session_id!r} is not this saver's session {self._only!r}"
            )
        return session_id

    def _lock(self, session_id: str) -> asyncio.Lock:
        # One read-build-commit at a time per thread: the patch is built from the body
        # read under this lock, so a concurrent write cannot slip between the two.
        return self._locks.setdefault(session_id, asyncio.Lock())

    async def _body(self, session_id: str) -> dict[str, Any]:
        document = await self._journal.document(session_id, thread.DOCUMENT)
        return {} if document is None else document.body

    async def _find(
        self, body: Mapping[str, Any], ns: str, checkpoint_id: str | None
    ) -> tuple[Record, JsonObject] | None:
        """A live namespace's record by id, with its ref (``None`` when not found)."""
        member = thread.namespace(body, ns) or {}
        if checkpoint_id is None or "tips" not in member:
            return None
        head = member.get("head") or {}
        if head.get("id") == checkpoint_id:
            return await self._records.load(head["ref"]), head["ref"]
        tips: dict[str, JsonObject] = member["tips"]
        if checkpoint_id in tips:
            return await self._records.load(tips[checkpoint_id]), tips[checkpoint_id]
        async for record in walk(self._records, tips.values()):
            if record.parent_id == checkpoint_id and record.parent_ref is not None:
                return await self._records.load(record.parent_ref), record.parent_ref
        return None

    async def _channels(
        self, checkpoint: Checkpoint, new_versions: ChannelVersions, parent: Record | None
    ) -> dict[str, JsonObject]:
        """Each channel's entry: new versions serialized, others reused from the parent
        when the version matches, else serialized from the checkpoint's values."""
        values = checkpoint["channel_values"]
        versions = {**checkpoint["channel_versions"], **new_versions}
        inherited = {} if parent is None else parent.channels
        found: dict[str, JsonObject] = {}
        for name, version in versions.items():
            if name in new_versions:
                entry = (
                    await encode_value(values[name], self.serde, self._put_blob)
                    if name in values
                    else {"empty": True}
                )
            elif name in inherited and inherited[name]["version"] == version:
                found[name] = inherited[name]
                continue
            elif name in values:
                entry = await encode_value(values[name], self.serde, self._put_blob)
            else:
                continue
            found[name] = {**entry, "version": version}
        return found

    async def _tuple(
        self, session_id: str, record: Record, writes: Mapping[str, JsonObject]
    ) -> CheckpointTuple:
        versions = record.checkpoint.get("channel_versions") or {}
        names = [
            name
            for name, entry in record.channels.items()
            if name in versions and not entry.get("empty")
        ]
        decoded = await asyncio.gather(
            *(self._decode(record.channels[name]) for name in names),
            *(self._decode(write) for write in thread.ordered(writes.values())),
        )
        values = dict(zip(names, decoded[: len(names)], strict=True))
        pending = [
            (write["task"], write["channel"], value)
            for write, value in zip(
                thread.ordered(writes.values()), decoded[len(names) :], strict=True
            )
        ]
        checkpoint: Checkpoint = {**record.checkpoint, "channel_values": values}  # type: ignore[typeddict-item]
        parent_config: RunnableConfig | None = None
        if record.parent_id is not None:
            parent_config = _config(session_id, record.ns, record.parent_id)
        return CheckpointTuple(
            config=_config(session_id, record.ns, record.id),
            checkpoint=checkpoint,
            metadata=record.metadata,  # type: ignore[arg-type]
            parent_config=parent_config,
            pending_writes=pending,
        )

    async def _decode(self, stored: JsonObject) -> Any:
        return await decode_value(stored, self.serde, self._journal.get_blob)

    async def _put_blob(self, data: bytes, media_type: str) -> BlobRef:
        """Put a blob unless this saver already wrote or saw the same bytes."""
        key = hashlib.sha256(data).hexdigest() + " " + media_type
        found = self._known.get(key)
        if found is None:
            found = await self._journal.put_blob(data, media_type)
            self._known[key] = found
            while len(self._known) > _KNOWN_BLOBS:
                self._known.popitem(last=False)
        self._known.move_to_end(key)
        return found


def _ns(config: RunnableConfig) -> str:
    ns: str = (config.get("configurable") or {}).get("checkpoint_ns") or ""
    return ns


def _config(session_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": session_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _selected(
    record: Record, wanted: str | None, before_id: str | None, filter: dict[str, Any] | None
) -> bool:
    if wanted is not None and record.id != wanted:
        return False
    if before_id is not None and not record.id < before_id:
        return False
    return not filter or all(record.metadata.get(k) == v for k, v in filter.items())


def _head(record: Record, ref: BlobRef) -> JsonObject:
    head: JsonObject = {"id": record.id, "ref": ref_json(ref), "depth": record.depth}
    for key in ("step", "source"):
        value = record.metadata.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            head[key] = value
    return head


def _note(record: Record, checkpoint: Checkpoint) -> Entry:
    """The entry ``bh watch`` and the console show for a super-step."""
    updated = checkpoint.get("updated_channels")
    entry_id = f"lg-{record.id}"
    if not _IDENTIFIER.match(entry_id):  # ids LangGraph did not make (uuid6) may not fit
        entry_id = "lg-" + hashlib.sha256(record.id.encode()).hexdigest()[:32]
    return Entry(
        id=entry_id,
        kind=EntryKind.NOTE,
        conversation_id="langgraph",
        content={
            "step": record.metadata.get("step"),
            "source": record.metadata.get("source"),
            "ns": record.ns,
            "checkpoint_id": record.id,
            "updated_channels": None if updated is None else sorted(updated),
        },
    )
