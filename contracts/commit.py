"""Commits: the atomic write sets that make up a session's log."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from contracts.document import DocumentWrite
from contracts.entry import Entry
from contracts.intent import Intent
from contracts.model import AwareDatetime, Frozen, Identifier, utcnow
from contracts.outbox import OutboxMessage
from contracts.submission import Submission
from contracts.task import Task
from contracts.workspace import WorkspaceVersion

COMMIT_RECORD_VERSION: Final = 1


class Fork(Frozen):
    """The first commit of a session forked from ``session_id`` as it was after commit
    ``seq``: its history is that one's up to there, referred to, not copied."""

    session_id: Identifier
    seq: int = Field(ge=1)


class Origin(Frozen):
    """Where a forked session's history comes from: ``session_id`` up to commit ``seq``,
    whose first ``entries_archived`` entries (and the records it had archived by then)
    stay in that session's archive; ``origin`` when that session was a fork too."""

    session_id: Identifier
    seq: int = Field(ge=1)
    entries_archived: int = Field(default=0, ge=0)
    #: operations that session's state held at ``seq`` (pending intents and applied
    #: results): a fork reuses them by their ids, whatever its own archive does later
    operations: tuple[str, ...] = ()
    origin: Origin | None = None

    def lineage(self) -> list[Origin]:
        """This origin, then its own origin, and so on."""
        found: list[Origin] = []
        at: Origin | None = self
        while at is not None:
            found.append(at)
            at = at.origin
        return found


class Commit(Frozen):
    """One atomic write set. Either every write in it becomes visible, or none does.

    ``tasks`` and ``submissions`` carry whole records: ``rev`` 1 creates, ``rev`` n+1
    replaces revision n. ``applied_operations`` marks operation results as entered into
    the session; an operation can be applied once only. ``intents`` are the tool calls
    the Hands may run (``contracts.intent``).
    """

    entries: tuple[Entry, ...] = ()
    documents: tuple[DocumentWrite, ...] = ()
    tasks: tuple[Task, ...] = ()
    submissions: tuple[Submission, ...] = ()
    outbox: tuple[OutboxMessage, ...] = ()
    outbox_done: tuple[Identifier, ...] = ()
    applied_operations: tuple[Identifier, ...] = ()
    #: tool calls the Hands may run (with their dispatch messages in ``outbox``)
    intents: tuple[Intent, ...] = ()
    #: only on commit 1: the session starts as a fork of another (``Fork``)
    fork: Fork | None = None
    #: the session's workspace head becomes this version (``contracts.workspace``)
    workspace: WorkspaceVersion | None = None

    @property
    def is_empty(self) -> bool:
        return not (
            self.entries
            or self.documents
            or self.tasks
            or self.submissions
            or self.outbox
            or self.outbox_done
            or self.applied_operations
            or self.intents
            or self.fork
            or self.workspace
        )


class CommitRecord(Frozen):
    """A commit as stored at ``seq``.

    ``fence`` is the session's fence high-water mark after this commit: fences never
    decrease along the log. ``writer_fence`` is the fence the writer presented (None for
    unfenced ingress writers such as the Session API). ``claim`` marks a commit whose only
    purpose is to raise the fence for a new lease holder, named by ``holder``; no other
    holder may claim that fence. ``commit_id`` lets a writer whose request outcome was
    unknown recognise its own record.
    """

    v: Literal[1] = COMMIT_RECORD_VERSION
    type: Literal["commit"] = "commit"
    session_id: Identifier
    seq: int = Field(ge=1)
    commit_id: str
    fence: int = Field(ge=0)
    writer_fence: int | None = None
    claim: bool = False
    holder: str | None = None
    writer: str = ""
    committed_at: AwareDatetime = Field(default_factory=utcnow)
    commit: Commit = Field(default_factory=Commit)


class CommitReceipt(Frozen):
    """What a writer gets back once the store has confirmed its commit."""

    session_id: Identifier
    seq: int
    fence: int
    committed_at: AwareDatetime
