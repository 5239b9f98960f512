"""The task graph of a session as a tree a page draws: each task under its parent, in
creation order, with its depth."""

from __future__ import annotations

from dataclasses import dataclass

from session_api.views import TaskView


@dataclass(frozen=True)
class TaskNode:
    task: TaskView
    depth: int
    children: int


def task_rows(tasks: list[TaskView]) -> list[TaskNode]:
    """The tasks in depth-first order (a task's children right below it); a task whose
    parent is not in the view (archived) is a root."""
    known = {task.id for task in tasks}
    children: dict[str | None, list[TaskView]] = {}
    for task in tasks:
        parent = task.parent_id if task.parent_id in known else None
        children.setdefault(parent, []).append(task)
    rows: list[TaskNode] = []
    stack = [(task, 0) for task in reversed(children.get(None, []))]
    while stack:
        task, depth = stack.pop()
        below = children.get(task.id, [])
        rows.append(TaskNode(task, depth, len(below)))
        stack.extend((child, depth + 1) for child in reversed(below))
    return rows
