"""Small constructors that keep tests about behaviour, not about field lists."""

from __future__ import annotations

import uuid
from typing import Any

from contracts import (
    Commit,
    Entry,
    EntryKind,
    Outcome,
    Submission,
    SubmissionStatus,
    Task,
    TaskStatus,
)


def entry(content: Any = "x", *, entry_id: str | None = None) -> Entry:
    return Entry(id=entry_id or uuid.uuid4().hex, kind=EntryKind.NOTE, content=content)


def task(task_id: str = "t1", **fields: Any) -> Task:
    return Task(id=task_id, kind="test", **fields)


def advance(current: Task, **changes: Any) -> Task:
    """The next revision of ``current`` with ``changes``."""
    return Task.model_validate({**current.model_dump(), **changes, "rev": current.rev + 1})


def finish(current: Task, outcome: Outcome = Outcome.SUCCEEDED, result: Any = None) -> Task:
    return advance(current, status=TaskStatus.TERMINAL, outcome=outcome, result=result)


def submission(request_id: str = "r1", **fields: Any) -> Submission:
    return Submission(request_id=request_id, **fields)


def answer(current: Submission, text: str = "done") -> Submission:
    return Submission.model_validate(
        {
            **current.model_dump(),
            "status": SubmissionStatus.ANSWERED,
            "answer": text,
            "rev": current.rev + 1,
        }
    )


def small_commit(n: int = 0, current: Task | None = None) -> tuple[Commit, Task]:
    """One entry and one task update: the benchmark's and the chaos tests' unit of work."""
    updated = task() if current is None else advance(current, phase=f"p{n}")
    return Commit(entries=(entry(n),), tasks=(updated,)), updated
